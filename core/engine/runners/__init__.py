"""What executes one step of a session: a child process (``process``: ``command:`` and the
``builtin:`` runners), or a streamed HTTP request (``http``: ``openai:``). The step protocol
they all speak is ``protocol``; the language of runner specs is ``procession.model.runner_spec``."""
