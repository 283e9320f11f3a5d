"""Reports over a set of accounts."""


def trial_balance(accounts):
    """The sum of all balances (zero in a balanced book)."""
    return sum(a.balance for a in accounts)


def largest(accounts, n=3):
    """The n accounts with the largest balances."""
    return sorted(accounts, key=lambda a: a.balance, reverse=True)[:n]
