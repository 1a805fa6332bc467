"""The HTTP API: FastAPI routers (one module a surface), the models, the error shape, the route guard."""
