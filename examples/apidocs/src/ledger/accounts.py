"""Accounts and their balances."""


class Account:
    """A named account with a running balance."""

    def __init__(self, name, balance=0):
        self.name = name
        self.balance = balance

    def deposit(self, amount):
        """Add money to the account."""
        self.balance += amount

    def withdraw(self, amount):
        """Take money out; refuses to go below zero."""
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount


def transfer(source, target, amount):
    """Move money between two accounts atomically."""
    source.withdraw(amount)
    target.deposit(amount)
