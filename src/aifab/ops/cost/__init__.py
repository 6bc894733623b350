"""Cost accounting: prices, the ledger of priced usage, reports, and team budgets."""
