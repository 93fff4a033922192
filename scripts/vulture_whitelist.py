"""What `make lint`'s dead-code check (vulture, configured in pyproject.toml) must count as
used although nothing in the tree reads it: names read by a framework, by the interpreter
or by callers outside the tree. Each entry says which.

Never run: vulture reads it as source, and mypy checks it, so an entry whose name has gone
fails lint instead of hiding the next dead thing of that name. Framework hooks that come in
families (pydantic validators, pytest fixtures, MCP resources) are ignored by decorator in
pyproject.toml rather than listed here.
"""

from __future__ import annotations

import http.server
import logging
from types import TracebackType

import uvicorn
from pydantic import BaseModel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from starlette.middleware.base import BaseHTTPMiddleware
from tqdm import tqdm

from memoryd.console.metrics import Figures
from memoryd.core.models import Kind, Role
from memoryd_client import MemoryClient
from memoryd_client.export_format import Checksum
from memoryd_client.results import ScoreComponents


def _parameters(
    # __exit__ / __aexit__ take the traceback whether they use it or not.
    tb: TracebackType | None,
    # BaseSettings.settings_customise_sources's signature names every source.
    dotenv_settings: PydanticBaseSettingsSource,
    # Test parameters that request a fixture for its effect (tests/fuzz, test_deploy_files).
    no_errors_logged: None,
    read_only_root: None,
) -> object:
    return tb, dotenv_settings, no_errors_logged, read_only_root


def _instance_attributes(explain: ScoreComponents, web: uvicorn.Server) -> object:
    # ask.html's MMR component (the client's public ScoreComponents field of that name);
    # uvicorn's serve loop polls should_exit, which the console's runners set.
    return explain.mmr, web.should_exit


_USED = (
    # Members of the domain enums that only transport/convert.py's by-name conversion names.
    Kind.DECISION,
    Role.SYSTEM,
    Role.TOOL,
    # Read by pydantic's metaclass on every model and settings class.
    BaseModel.model_config,
    # pydantic-settings calls this override of each Settings class.
    BaseSettings.settings_customise_sources,
    # The Python client's public API: MemoryClient.from_env (clients/python/README.md) and
    # export_format.Checksum (in that module's __all__).
    MemoryClient.from_env,
    Checksum.matches,
    # Read only by the console's Jinja templates (service/memoryd/console/templates/), which
    # vulture does not parse: health.html's rate.
    Figures.rate_per_s,
    # Starlette calls a middleware's dispatch.
    BaseHTTPMiddleware.dispatch,
    # Instance attributes (below).
    _instance_attributes,
    # Set for the logging module, which reads them on every record (transport/logs.py).
    logging.logThreads,
    logging.logProcesses,
    logging.logMultiprocessing,
    # Set on our tqdm bar and read by tqdm (cli/progress.py).
    tqdm.monitor_interval,
    # Read by http.server in the tests' stub servers (tests/openai_stub.py, chat_stub.py).
    http.server.ThreadingHTTPServer.daemon_threads,
    http.server.BaseHTTPRequestHandler.log_message,
    # Parameter names that a protocol or a test's fixture request imposes (above).
    _parameters,
)
