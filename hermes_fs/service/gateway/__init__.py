"""The gateway: chat platforms and signed webhooks as producers of inbox requests (the vault is the bus)."""
