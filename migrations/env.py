"""Alembic environment for reportdb: runs on the connection (and inside the transaction) it is given.

No logging configuration here: a library must not take over its host application's logging.
"""

from alembic import context

VERSION_TABLE = "reportdb_alembic_version"

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=None,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
