"""`memoryd console`: the operator's web console, a gRPC client of the service (like the
CLI, it never touches the stores). Server-rendered pages (Starlette + Jinja2), assets
shipped in the package, sessions kept server-side; see docs/console.md."""
