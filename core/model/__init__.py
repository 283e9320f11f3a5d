"""The vocabulary every layer speaks: calls, states, records, outcomes, errors, limits, and
the languages of runner and trigger specs."""
