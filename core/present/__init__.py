"""The words of every face: cells of the process table, lines about sessions, what a call
did and the notes it left, and the reading of what a person types. No face words these
things on its own, so the CLI and the monitor cannot drift apart."""
