"""Alembic environment for reportdb: runs on the connection (and inside the transaction) it is given.

No logging configuration here: a library must not take over its host application's logging. The version table's
name comes from the module that reads it at open time, so the two can never disagree.
"""

from alembic import context

from reportdb.store.schema import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=None,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
