"""Alembic environment: runs online against the connection aifab passes in."""

from alembic import context

from aifab.core.db import VERSION_TABLE

connection = context.config.attributes["connection"]
# Not "alembic_version": other tools sharing the metadata DB (Optuna's study storage) keep
# their own Alembic revision there.
context.configure(connection=connection, render_as_batch=True, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
