"""A tiny double-entry ledger: the code the API-docs session documents."""
