"""The web page (`hermes-fs web`, or the daemon with `web.enabled: true`): review learned changes,
read and edit memory and skills, jobs, sessions and status in a browser, through the same library
calls as the CLI. Server-rendered (Starlette, Jinja2), a few lines of JavaScript for live updates.
"""
