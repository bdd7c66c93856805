"""A realistic-looking skill library (tools x tasks) and questions that each need one skill.

Questions are phrased the way people ask, not copied from descriptions: they name the tool and
describe the goal in their own words, so routing is measured on paraphrase, not string equality.
"""

from __future__ import annotations

import zlib

TOOLS = {
    "postgres": "PostgreSQL databases", "mysql": "MySQL databases", "redis": "Redis caches",
    "kubernetes": "Kubernetes clusters", "docker": "Docker containers", "terraform": "Terraform infrastructure",
    "nginx": "nginx web servers", "github-actions": "GitHub Actions CI", "aws-s3": "Amazon S3 buckets",
    "django": "Django web apps", "react": "React front-ends", "pytest": "pytest test suites",
    "git": "git repositories", "kafka": "Kafka topics", "elasticsearch": "Elasticsearch indexes",
    "stripe": "Stripe payments", "grafana": "Grafana dashboards", "prometheus": "Prometheus monitoring",
    "ansible": "Ansible playbooks", "systemd": "systemd services", "rust-cargo": "Rust crates with cargo",
    "node-npm": "Node.js packages with npm", "fastapi": "FastAPI services", "celery": "Celery task queues",
    "rabbitmq": "RabbitMQ brokers", "mongodb": "MongoDB collections", "sqlite": "SQLite files",
    "airflow": "Airflow DAGs", "spark": "Spark jobs", "pandas": "pandas dataframes",
    "jupyter": "Jupyter notebooks", "vim": "Vim configuration", "tmux": "tmux sessions",
    "ssh": "SSH access", "letsencrypt": "Let's Encrypt certificates", "cloudflare": "Cloudflare DNS",
    "gcp-bigquery": "BigQuery warehouses", "azure-devops": "Azure DevOps pipelines", "helm": "Helm charts",
    "vault-secrets": "HashiCorp Vault secrets", "slack-bot": "Slack bots", "twilio": "Twilio SMS",
    "ffmpeg": "ffmpeg media files", "latex": "LaTeX documents", "excel": "Excel spreadsheets",
    "obsidian": "Obsidian notes", "openapi": "OpenAPI specs", "graphql": "GraphQL APIs",
    "webpack": "webpack bundles", "playwright": "Playwright browser tests",
}

TASKS = {
    "backup": ("Back up {t} safely and verify the copy restores", "back up my {n} before the upgrade"),
    "restore": ("Restore {t} from a backup after data loss", "get my {n} data back from last night's backup"),
    "upgrade": ("Upgrade {t} to a new major version without downtime", "move my {n} to the next major version"),
    "debug-slow": ("Diagnose slow performance and latency in {t}", "figure out why {n} got so slow today"),
    "monitor": ("Set up health checks, metrics and alerts for {t}", "get alerted when {n} goes unhealthy"),
    "migrate": ("Migrate {t} to a new host or provider step by step", "move {n} over to the new server"),
    "secure": ("Harden security, permissions and access control of {t}", "lock down who can access {n}"),
    "setup": ("Install and configure {t} from scratch for a new project", "set up {n} for a brand new project"),
    "cleanup": ("Clean up disk usage, stale data and leftovers in {t}", "free space used by {n}, the disk is full"),
    "rollback": ("Roll back a failed change or release of {t}", "undo the broken {n} change we shipped"),
    "test": ("Write and run automated tests for {t}", "add tests around our {n} setup"),
    "logs": ("Find and read the logs and errors of {t}", "see what errors {n} has been logging"),
    "scale": ("Scale {t} up or out to handle more load", "make {n} handle ten times the traffic"),
    "cost": ("Reduce the cost and resource usage of {t}", "cut what we spend on {n}"),
    "docs": ("Document {t} usage and conventions for the team", "write up how our team uses {n}"),
    "automate": ("Automate recurring {t} chores with scripts and schedules", "script the boring weekly {n} chores"),
    "troubleshoot-auth": ("Fix login, token and authentication failures in {t}", "{n} keeps rejecting our credentials"),
    "export": ("Export data out of {t} to CSV or JSON", "dump the {n} data out to a CSV"),
    "config-review": ("Review {t} configuration for mistakes and bad defaults", "check our {n} config for anything wrong"),
    "onboarding": ("Onboard a new teammate onto {t}", "get the new hire productive with {n}"),
}


def skill_library(n: int) -> list[tuple[str, str]]:
    """(name, description) for n skills, tools-major so smaller libraries cover more tasks."""
    out = []
    for task, (desc, _q) in TASKS.items():
        for tool, label in TOOLS.items():
            out.append((f"{tool}-{task}", f"{desc.format(t=label)}. Use when the user works with {tool.replace('-', ' ')} and wants to {task.replace('-', ' ')}."))
    # interleave so the first n cover many tools and tasks
    out.sort(key=lambda item: (zlib.crc32(item[0].encode()) % 9973, item[0]))  # stable across runs, unlike hash()
    return out[:n]


def questions(library: list[tuple[str, str]], count: int = 40) -> list[tuple[str, str]]:
    """(question, needed skill) for `count` skills spread over the library."""
    step = max(1, len(library) // count)
    qs = []
    for name, _desc in library[::step][:count]:
        task = next(t for t in TASKS if name.endswith("-" + t))
        tool = name[: -len(task) - 1]
        qs.append((f"Can you help me {TASKS[task][1].format(n=tool.replace('-', ' '))}?", name))
    return qs


def skill_md(name: str, description: str) -> str:
    return (f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n"
            "1. Check the current state first.\n2. Make the change in small steps.\n3. Verify the result.\n")
