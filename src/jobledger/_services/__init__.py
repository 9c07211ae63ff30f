"""Services over the storage roles that the ledger offers to the HTTP API and the CLI."""
