"""crow.store: durable sessions in SQLite (WAL).  Import from ``crow.store.db``."""
