"""The resolver that mounts reportdb.web in ttnn-visualizer: a request's report is the profiler report its
visualizer instance (``?instanceId=``, which every request of the visualizer's page carries) has open, so the
blueprint serves whatever report the visualizer's own flow opened, at run time::

    app = ttnn_visualizer.app.create_app()
    app.register_blueprint(reportdb.web.blueprint(resolver=reportdb.web.visualizer.active_report),
                           url_prefix="/reportdb")
"""

from __future__ import annotations

import importlib

from flask import Request


def active_report(request: Request) -> str | None:
    """The database path of the profiler report the request's instance has open (None: no instance, or none open).
    Runs inside the visualizer's app, reading its instance table through its own models."""
    instance_id = request.args.get("instanceId")
    if not instance_id:
        return None
    models = importlib.import_module("ttnn_visualizer.models")
    db = importlib.import_module("ttnn_visualizer.extensions").db
    row = db.session.query(models.InstanceTable).filter_by(instance_id=instance_id).first()
    path = getattr(row, "profiler_path", None)
    return str(path) if path else None
