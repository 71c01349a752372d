"""The admin dashboard: server-rendered pages, charts, login sessions and the login throttle."""
