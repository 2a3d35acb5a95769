"""Process upkeep, on Crow's bottom floor: child processes that die with Crow
(``children``), the event loop (``event_loop``), the collector (``gc_tuning``), imports
off the event loop (``imports``), memory handed back when quiet (``quiet``), a slow exit
that says what it waits for (``slow_exit``), memory debugging (``memory_debug``), what a
pid is (``proc``), and the runtime file a served port's clients read (``runtime_file``).

Nothing here imports the rest of Crow (``runtime_file`` uses only ``crow.private``), so
every layer may use it.  The package itself imports nothing: ``children`` also runs as a
file on its own (the reaper), and start-up pays only for the modules it uses.
"""
