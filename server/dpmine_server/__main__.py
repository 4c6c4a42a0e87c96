"""``python -m dpmine_server``: the ``dpmine-server`` command (the server starts its local
PostgreSQL workers this way, with its own interpreter)."""

from dpmine_server.cli import main

if __name__ == "__main__":
    main()
