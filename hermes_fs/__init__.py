"""hermes-fs: a persistent agent whose mind is a git repository of Markdown files.

The package is a library first; `cli` is a thin layer over it. Modules, one per concept:
`config` (hermes.yaml), `vault` (finding and creating vaults, confined paths), `docs`
(frontmatter documents), `memory`, `skills`, `schedule`/`cron` (job files), `secrets`
(the commit-time scanner), `gitstore` (every git operation), `notify` (Apprise), `status`.
"""

__version__ = "0.1.0"
