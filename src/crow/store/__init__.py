"""crow.store: durable sessions, in SQLite (WAL) or on a PostgreSQL server.

- ``db``: ``open_store`` (the backend from the location), and the names the rest of
  Crow imports (``from crow.store.db import ...``);
- ``base``: ``SessionStore``, what the agent needs of a store;
- ``backend``: ``Store``, the operations over the shared SQL of ``sql``;
  ``sqlite`` and ``postgres``, its two backends; ``migrations``, their schema;
- ``aio``: ``AsyncStore``, the store on the event loop; ``listen``: hearing other
  servers (PostgreSQL); ``lease``: who runs a session's turn; ``tails``: what this
  process knows of the transcripts it writes (a model call need not read them back);
- ``records``: records, rows and errors; ``urls``: PostgreSQL locations.
"""
