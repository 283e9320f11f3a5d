"""The workspace schema as numbered migrations.

``PRAGMA user_version`` holds how many migrations a workspace has had. Opening applies the
missing ones, each in its own transaction, so a workspace made by an older Procession opens
in a newer one. A workspace whose version is above ``len(MIGRATIONS)`` was made by a newer
Procession and is refused before anything is written to it.

History is append-only: a message row, once written, is never updated or deleted. That is
what makes a fork copy-on-write (a child reads its ancestors' rows up to its fork point)
and what makes compress reversible (a fold only hides rows).
"""

from __future__ import annotations

from typing import Final

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: the model of DESIGN.md
    """
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE agents (
        id      INTEGER PRIMARY KEY,
        name    TEXT NOT NULL UNIQUE,
        created REAL NOT NULL
    );

    CREATE TABLE sessions (
        -- small, often-read columns first and long texts last, so that a scan of the table
        -- (the process table) never walks their overflow pages
        id              INTEGER PRIMARY KEY,
        uuid            TEXT NOT NULL UNIQUE,
        agent_id        INTEGER NOT NULL REFERENCES agents(id),
        name            TEXT NOT NULL,
        state           TEXT NOT NULL,
        reason          TEXT,
        resume_to       TEXT,
        priority        INTEGER NOT NULL DEFAULT 0,
        runner          TEXT NOT NULL,
        window          INTEGER NOT NULL,
        timeout         REAL,
        cwd             TEXT NOT NULL,
        armed           INTEGER NOT NULL DEFAULT 1,
        parent_id       INTEGER REFERENCES sessions(id),
        fork_seq        INTEGER NOT NULL DEFAULT 0,
        merged_into     INTEGER REFERENCES sessions(id),
        length          INTEGER NOT NULL DEFAULT 0,
        history_tokens  INTEGER NOT NULL DEFAULT 0,
        system_tokens   INTEGER NOT NULL DEFAULT 0,
        context_tokens  INTEGER NOT NULL DEFAULT 0,
        context_count   INTEGER NOT NULL DEFAULT 0,
        created         REAL NOT NULL,
        last_active     REAL NOT NULL,
        queued_at       REAL,
        rev             INTEGER NOT NULL DEFAULT 0,
        base_at         REAL,
        goal            TEXT NOT NULL DEFAULT '',
        causes          TEXT,
        base_memory     TEXT,
        system          TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX sessions_rev ON sessions(rev);
    CREATE INDEX sessions_parent ON sessions(parent_id);
    CREATE INDEX sessions_queue ON sessions(state, priority, queued_at);

    CREATE TABLE messages (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        seq         INTEGER NOT NULL,
        role        TEXT NOT NULL,
        content     TEXT NOT NULL,
        tokens      INTEGER NOT NULL,
        cum_tokens  INTEGER NOT NULL,
        author      TEXT NOT NULL DEFAULT 'user',
        pinned      INTEGER NOT NULL DEFAULT 0,
        meta        TEXT,
        run_id      INTEGER,
        created     REAL NOT NULL
    );
    CREATE UNIQUE INDEX messages_seq ON messages(session_id, seq);

    CREATE TABLE folds (
        id               INTEGER PRIMARY KEY,
        session_id       INTEGER NOT NULL REFERENCES sessions(id),
        lo               INTEGER NOT NULL,
        hi               INTEGER NOT NULL,
        summary          TEXT NOT NULL,
        summary_tokens   INTEGER NOT NULL,
        archived_count   INTEGER NOT NULL,
        archived_tokens  INTEGER NOT NULL,
        created          REAL NOT NULL,
        expanded         REAL
    );
    CREATE INDEX folds_session ON folds(session_id, expanded);

    CREATE TABLE memory (
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        key         TEXT NOT NULL,
        value       TEXT NOT NULL,
        updated     REAL NOT NULL,
        PRIMARY KEY (session_id, key)
    ) WITHOUT ROWID;

    CREATE TABLE resources (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        kind        TEXT NOT NULL,
        uri         TEXT NOT NULL,
        mode        TEXT NOT NULL DEFAULT 'rw',
        created     REAL NOT NULL,
        UNIQUE (session_id, kind, uri)
    );

    CREATE TABLE triggers (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        kind        TEXT NOT NULL,
        spec        TEXT NOT NULL,
        armed       INTEGER NOT NULL DEFAULT 1,
        created     REAL NOT NULL,
        last_fired  REAL,
        fired       INTEGER NOT NULL DEFAULT 0,
        pending     TEXT,
        state       TEXT
    );
    CREATE INDEX triggers_session ON triggers(session_id);

    CREATE TABLE checkpoints (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        name        TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        state       TEXT NOT NULL,
        created     REAL NOT NULL,
        UNIQUE (session_id, name)
    );

    CREATE TABLE runs (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        cause       TEXT NOT NULL,
        started     REAL NOT NULL,
        ended       REAL,
        outcome     TEXT,
        exit_code   INTEGER,
        pid         INTEGER,
        proc_start  REAL,
        engine      TEXT,
        cpu         REAL,
        rss         INTEGER,
        tokens_in   INTEGER NOT NULL DEFAULT 0,
        tokens_out  INTEGER NOT NULL DEFAULT 0,
        error       TEXT
    );
    CREATE INDEX runs_session ON runs(session_id, id);
    CREATE INDEX runs_live ON runs(ended) WHERE ended IS NULL;

    CREATE TABLE journal (
        id          INTEGER PRIMARY KEY,
        ts          REAL NOT NULL,
        actor       TEXT NOT NULL,
        call        TEXT NOT NULL,
        session_id  INTEGER,
        other_id    INTEGER,
        args        TEXT NOT NULL,
        outcome     TEXT NOT NULL
    );
    CREATE INDEX journal_session ON journal(session_id, id);
    CREATE INDEX journal_other ON journal(other_id, id) WHERE other_id IS NOT NULL;
    CREATE INDEX journal_wakes ON journal(ts) WHERE call = 'wake';

    CREATE TABLE lease (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        token       TEXT NOT NULL,
        pid         INTEGER NOT NULL,
        host        TEXT NOT NULL,
        started     REAL NOT NULL,
        heartbeat   REAL NOT NULL,
        slots       INTEGER NOT NULL
    );
    """,
    # 2: trigger ids are never reused (journal rows name them); after-chains are found by index
    """
    CREATE TABLE triggers_v2 (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        kind        TEXT NOT NULL,
        spec        TEXT NOT NULL,
        armed       INTEGER NOT NULL DEFAULT 1,
        created     REAL NOT NULL,
        last_fired  REAL,
        fired       INTEGER NOT NULL DEFAULT 0,
        pending     TEXT,
        state       TEXT
    );
    INSERT INTO triggers_v2 SELECT id, session_id, kind, spec, armed, created, last_fired, fired, pending, state
        FROM triggers;
    DROP TABLE triggers;
    ALTER TABLE triggers_v2 RENAME TO triggers;
    CREATE INDEX triggers_session ON triggers(session_id);
    CREATE INDEX triggers_after ON triggers(json_extract(spec, '$.session')) WHERE kind = 'after';
    """,
    # 3: what a user must see of a session's runs (its last outcome, its failures in a row, the
    # back-off of trigger-fired runs), the processes of a run and its output, the lease holder's
    # identity. The sessions table is rebuilt so that its long texts stay last.
    """
    CREATE TABLE sessions_v3 (
        id              INTEGER PRIMARY KEY,
        uuid            TEXT NOT NULL UNIQUE,
        agent_id        INTEGER NOT NULL REFERENCES agents(id),
        name            TEXT NOT NULL,
        state           TEXT NOT NULL,
        reason          TEXT,
        resume_to       TEXT,
        priority        INTEGER NOT NULL DEFAULT 0,
        runner          TEXT NOT NULL,
        window          INTEGER NOT NULL,
        timeout         REAL,
        cwd             TEXT NOT NULL,
        armed           INTEGER NOT NULL DEFAULT 1,
        parent_id       INTEGER REFERENCES sessions(id),
        fork_seq        INTEGER NOT NULL DEFAULT 0,
        merged_into     INTEGER REFERENCES sessions(id),
        length          INTEGER NOT NULL DEFAULT 0,
        history_tokens  INTEGER NOT NULL DEFAULT 0,
        system_tokens   INTEGER NOT NULL DEFAULT 0,
        context_tokens  INTEGER NOT NULL DEFAULT 0,
        context_count   INTEGER NOT NULL DEFAULT 0,
        created         REAL NOT NULL,
        last_active     REAL NOT NULL,
        queued_at       REAL,
        rev             INTEGER NOT NULL DEFAULT 0,
        base_at         REAL,
        last_outcome    TEXT,
        failures        INTEGER NOT NULL DEFAULT 0,
        fail_limit      INTEGER NOT NULL DEFAULT 3,
        not_before      REAL,
        goal            TEXT NOT NULL DEFAULT '',
        causes          TEXT,
        base_memory     TEXT,
        system          TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO sessions_v3 (id, uuid, agent_id, name, state, reason, resume_to, priority, runner, window, timeout, cwd, armed,
        parent_id, fork_seq, merged_into, length, history_tokens, system_tokens, context_tokens, context_count, created,
        last_active, queued_at, rev, base_at, goal, causes, base_memory, system) SELECT id, uuid, agent_id, name, state, reason, resume_to, priority, runner, window, timeout, cwd, armed,
        parent_id, fork_seq, merged_into, length, history_tokens, system_tokens, context_tokens, context_count, created,
        last_active, queued_at, rev, base_at, goal, causes, base_memory, system FROM sessions;
    DROP TABLE sessions;
    ALTER TABLE sessions_v3 RENAME TO sessions;
    CREATE INDEX sessions_rev ON sessions(rev);
    CREATE INDEX sessions_parent ON sessions(parent_id);
    CREATE INDEX sessions_queue ON sessions(state, priority, queued_at);
    UPDATE sessions SET last_outcome = (SELECT outcome FROM runs r WHERE r.session_id = sessions.id AND r.ended
        IS NOT NULL ORDER BY r.id DESC LIMIT 1);

    ALTER TABLE runs ADD COLUMN frozen_s REAL NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN tracker TEXT;
    ALTER TABLE lease ADD COLUMN proc_start REAL;

    CREATE TABLE run_output (
        id          INTEGER PRIMARY KEY,
        run_id      INTEGER NOT NULL REFERENCES runs(id),
        stream      TEXT NOT NULL,
        ts          REAL NOT NULL,
        data        TEXT NOT NULL
    );
    CREATE INDEX run_output_run ON run_output(run_id, id);
    """,
    # 4: sessions run by agent CLIs. A session's own environment (``env``: stored settings;
    # ``pass_env``: names passed through from the engine at run time, never their values);
    # the agent's own session (``agent_ref``: cli, id, cwd, transcript), the last message it
    # has seen (``agent_seen``) and its real context as it last reported it. A run's cache
    # tokens, what its prompt held, and what the agent is doing while it runs (``status``).
    """
    ALTER TABLE sessions ADD COLUMN env TEXT;
    ALTER TABLE sessions ADD COLUMN pass_env TEXT;
    ALTER TABLE sessions ADD COLUMN agent_ref TEXT;
    ALTER TABLE sessions ADD COLUMN agent_seen INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN agent_context INTEGER;
    ALTER TABLE sessions ADD COLUMN agent_window INTEGER;
    ALTER TABLE runs ADD COLUMN cache_read INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN cache_write INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN prompt_upto INTEGER;
    ALTER TABLE runs ADD COLUMN status TEXT;
    """,
    # 5: the session a session was spawned by, when an agent spawned it through its MCP server:
    # the monitor's tree shows it there, as it shows a fork under its parent.
    """
    ALTER TABLE sessions ADD COLUMN spawned_by INTEGER REFERENCES sessions(id);
    """,
    # 6 (worktrees, issue 12): a step of its own, adding one table and touching no other, so
    # that it can be renumbered after any other migration without a change to its text.
    # A fork's own folder, made by ``fork --worktree``: a git worktree on a new branch
    # (kind 'git': ``base`` is the commit it started at) or a copy of a folder outside git
    # (kind 'copy': ``base`` is the JSON manifest of the files copied, the base of a merge
    # back). ``path`` is what was made (and what is removed), ``folder`` the session's folder
    # in it, ``source`` the parent's folder it came from, ``repo`` (git) the repository's
    # common git folder and ``branch`` the fork's branch; ``removed`` is set once it is gone.
    """
    CREATE TABLE worktrees (
        session_id  INTEGER PRIMARY KEY REFERENCES sessions(id),
        kind        TEXT NOT NULL,
        path        TEXT NOT NULL,
        folder      TEXT NOT NULL,
        source      TEXT NOT NULL,
        repo        TEXT,
        branch      TEXT,
        created     REAL NOT NULL,
        removed     REAL,
        base        TEXT NOT NULL
    );
    """,
    # ---- end of worktrees
    # 7 (tokens, issue 14): a step of its own, adding columns and touching nothing else, so that
    # it can be renumbered after any other migration without a change to its text. How a
    # session's context figure is made from the counts stored with its messages (in the
    # workspace's counter, ``meta.tokenizer``): ``tokenizer`` is the session's own (a
    # tokenizer.json path, ``tiktoken:NAME``; NULL: none), ``token_scale`` the factor its
    # context is multiplied by when shown and checked against its window (the tokenizer's
    # count over the stored one, then smoothed towards what the server reported it was sent),
    # ``token_samples`` how many server reports it was calibrated by.
    """
    ALTER TABLE sessions ADD COLUMN tokenizer TEXT;
    ALTER TABLE sessions ADD COLUMN token_scale REAL NOT NULL DEFAULT 1.0;
    ALTER TABLE sessions ADD COLUMN token_samples INTEGER NOT NULL DEFAULT 0;
    """,
    # ---- end of tokens
    # 8: working memory is copy-on-write for forks, as the history is. A fork reads its
    # memory through ``memory_from`` (the session it was forked from) and holds rows only for
    # keys that changed on either side since: its own changes, a deletion of an inherited key
    # (a row that is ``gone``, a tombstone), and the values its parent had before the parent
    # changed them (copied into the fork just before). ``memory_base`` keeps, for a fork, what
    # its parent held of a key when the fork was made, once the parent has changed it: the
    # base of a merge (NULL: the key was not there). Forks made before keep their copies.
    """
    ALTER TABLE sessions ADD COLUMN memory_from INTEGER REFERENCES sessions(id);
    CREATE INDEX sessions_memory_from ON sessions(memory_from) WHERE memory_from IS NOT NULL;
    ALTER TABLE memory ADD COLUMN gone INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE memory_base (
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        key         TEXT NOT NULL,
        value       TEXT,
        PRIMARY KEY (session_id, key)
    ) WITHOUT ROWID;
    """,
    # ---- end of memory
    # 9: what a session may touch: how the kernel holds its runs (``model.bounds``), and what
    # its last run (each run) was held by
    """
    ALTER TABLE sessions ADD COLUMN confine TEXT NOT NULL DEFAULT 'bound';
    ALTER TABLE sessions ADD COLUMN net TEXT NOT NULL DEFAULT 'any';
    ALTER TABLE sessions ADD COLUMN confinement TEXT;
    ALTER TABLE runs ADD COLUMN confinement TEXT;
    """,
    # 10: a database binding has one kind, sqlite (``db`` named it too: one file bound twice)
    """
    DELETE FROM resources WHERE kind = 'db' AND EXISTS (SELECT 1 FROM resources AS r WHERE
        r.session_id = resources.session_id AND r.kind = 'sqlite' AND r.uri = resources.uri);
    UPDATE resources SET kind = 'sqlite' WHERE kind = 'db';
    """,
    # 11: what a session's agent may do unasked (``permissions``: ``model.bounds``), what it
    # asked a person (``requests``: the tool and its input as the agent gave them, ``subject``
    # what a rule of it matches, ``key`` the agent's own id of the call; ``answer`` allow or
    # deny, once, or ``withdrawn`` when the run that asked ended otherwise; ``carried``: an
    # answer its run did not live to hear, for the next run) and the rules ``allow --always``
    # made (a tool, for one session; ``subject`` '' is any call of it); and whether a session's
    # run is run again when it was lost, failed or stopped (``restart``: ``model.states.Restart``),
    # and whether it sends notifications (``quiet``: none; ``engine.notify``); a run's cost as its
    # CLI reported it, and budgets (``limits``: a session's, or an agent's sessions' together;
    # ``warned``: the start of the period whose 80% was told; ``model.budgets``).
    """
    ALTER TABLE sessions ADD COLUMN permissions TEXT NOT NULL DEFAULT 'bound';
    ALTER TABLE sessions ADD COLUMN restart TEXT NOT NULL DEFAULT 'no';
    ALTER TABLE sessions ADD COLUMN quiet INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN cost REAL;
    CREATE TABLE limits (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER UNIQUE REFERENCES sessions(id),
        agent_id    INTEGER UNIQUE REFERENCES agents(id),
        tokens      INTEGER,
        cost        REAL,
        seconds     REAL,
        runs        INTEGER,
        per         TEXT NOT NULL,
        made        REAL NOT NULL,
        warned      REAL
    );
    CREATE TABLE requests (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        run_id      INTEGER REFERENCES runs(id),
        tool        TEXT NOT NULL,
        input       TEXT NOT NULL,
        subject     TEXT NOT NULL DEFAULT '',
        key         TEXT,
        asked       REAL NOT NULL,
        answer      TEXT,
        why         TEXT,
        answered    REAL,
        answered_by TEXT,
        carried     INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX requests_open ON requests(session_id) WHERE answer IS NULL;
    CREATE TABLE rules (
        id          INTEGER PRIMARY KEY,
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        tool        TEXT NOT NULL,
        subject     TEXT NOT NULL DEFAULT '',
        made        REAL NOT NULL,
        request_id  INTEGER REFERENCES requests(id),
        UNIQUE (session_id, tool, subject)
    );
    """,
    # 12: an agent whose sessions send no notifications (``set --agent NAME --quiet on``)
    """
    ALTER TABLE agents ADD COLUMN quiet INTEGER NOT NULL DEFAULT 0;
    """,
    # 13: flat costs whatever the forks. Working memory keeps versions: a row is a key's value
    # from the change stamp ``rev`` on (``meta.rev`` of the transaction that set it), and a
    # copy-on-write fork reads its parent's rows as of ``memory_rev``, the stamp when it was
    # made. A parent's change writes one row however many forks read it (before, it copied the
    # old value into each fork); a version no fork reads is replaced in place. Forks made
    # before read their parent as of now, their copies and ``memory_base`` rows kept. Names
    # are indexed per agent: a fork's name (``review #3``) is found without a scan; so are the
    # sessions an agent CLI holds, which a monitor looks for outside Procession every 3 s.
    """
    CREATE TABLE memory_versions (
        session_id  INTEGER NOT NULL REFERENCES sessions(id),
        key         TEXT NOT NULL,
        rev         INTEGER NOT NULL,
        value       TEXT NOT NULL,
        updated     REAL NOT NULL,
        gone        INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, key, rev)
    ) WITHOUT ROWID;
    INSERT INTO memory_versions (session_id, key, rev, value, updated, gone)
        SELECT session_id, key, 0, value, updated, gone FROM memory;
    DROP TABLE memory;
    ALTER TABLE memory_versions RENAME TO memory;
    ALTER TABLE sessions ADD COLUMN memory_rev INTEGER;
    UPDATE sessions SET memory_rev = (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'rev')
        WHERE memory_from IS NOT NULL;
    DROP INDEX sessions_memory_from;
    CREATE INDEX sessions_memory_from ON sessions(memory_from, memory_rev) WHERE memory_from IS NOT NULL;
    CREATE INDEX sessions_name ON sessions(agent_id, name);
    CREATE INDEX sessions_agent_ref ON sessions(state) WHERE agent_ref IS NOT NULL;
    """,
    # 14: a workspace several machines share (in PostgreSQL). A session belongs to a host, the
    # one its folder is on (``host``; every session of a workspace made before is given the
    # name of the machine that opens it first, where its file is: ``sqlite.HOSTED``). One
    # engine per host (``engines``, keyed by host, replaces the one ``lease``), running that
    # host's sessions only; ``machine`` is the name of the machine its process runs on (one
    # machine may stand for several hosts: its pid is checked there, its heartbeat elsewhere).
    # Who made each call (``journal.who``: user@host).
    """
    ALTER TABLE sessions ADD COLUMN host TEXT NOT NULL DEFAULT '';
    CREATE INDEX sessions_host ON sessions(host, state);
    CREATE TABLE engines (
        host        TEXT PRIMARY KEY,
        token       TEXT NOT NULL,
        pid         INTEGER NOT NULL,
        started     REAL NOT NULL,
        heartbeat   REAL NOT NULL,
        slots       INTEGER NOT NULL,
        proc_start  REAL,
        machine     TEXT NOT NULL
    ) WITHOUT ROWID;
    DROP TABLE lease;
    ALTER TABLE journal ADD COLUMN who TEXT;
    """,
    # 15: a session on its way to another host (``move``), the last move of each. The source
    # host's engine packs its folder ``was`` (``pack``, a tar; ``manifest``: what was packed, to
    # tell later whether the folder changed since) and its agent CLI's own session
    # (``carried``); the target's engine places them in ``folder`` (its other paths moved by
    # ``paths``) and takes the session; then the source's removes what it left, if unchanged.
    # ``stage``: packing, placing, clearing, done, or failed (``problem``); ``said``: what
    # the engines said of it, for the person who moved it.
    """
    CREATE TABLE moves (
        session_id  INTEGER PRIMARY KEY REFERENCES sessions(id),
        source      TEXT NOT NULL,
        target      TEXT NOT NULL,
        was         TEXT NOT NULL,
        folder      TEXT NOT NULL,
        paths       TEXT NOT NULL,
        files       INTEGER NOT NULL,
        stage       TEXT NOT NULL,
        pack        BLOB,
        manifest    TEXT,
        carried     TEXT,
        problem     TEXT,
        said        TEXT NOT NULL DEFAULT '[]',
        created     REAL NOT NULL,
        updated     REAL NOT NULL
    );
    """,
    # 16: a fork's own folder moves too (``tree``: it as it left, JSON: its kind, the
    # repository's common git folder, its branch, and the branch's tip then, so that the old
    # host removes the branch only if it is still at that commit). A git worktree's branch
    # travels as a bundle (``bundle``, all of its history: the other host's clone may lack any).
    """
    ALTER TABLE moves ADD COLUMN tree TEXT;
    ALTER TABLE moves ADD COLUMN bundle BLOB;
    """,
    # 17 (budgets follow the lineage, issue 34): the sessions a session spawned, found by index,
    # as its forks are (``sessions_parent``): a limit holds both, at any depth. A step of its
    # own, touching nothing else, so that it can be renumbered after any other migration.
    """
    CREATE INDEX sessions_spawned_by ON sessions(spawned_by) WHERE spawned_by IS NOT NULL;
    """,
    # 18: the devices paired with the web face (``procession web``): each known by the SHA-256 of
    # the secret its cookie holds (``token``; the secret itself is stored nowhere), its CSRF
    # token, whether it may only read, and when it was revoked; and the one-time pairing links
    # (the SHA-256 of their secret, until when they may be used, when they were).
    """
    CREATE TABLE devices (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL,
        token       TEXT NOT NULL UNIQUE,
        csrf        TEXT NOT NULL,
        read_only   INTEGER NOT NULL DEFAULT 0,
        created     REAL NOT NULL,
        seen        REAL,
        revoked     REAL
    );
    CREATE TABLE pairings (
        token       TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        read_only   INTEGER NOT NULL DEFAULT 0,
        expires     REAL NOT NULL,
        used        REAL
    );
    """,
    # 19: a push's buttons (``[notify] buttons``): the one-time tokens that answer one request
    # once, each known by its SHA-256 as a device is; and the runs that ended, newest first, for
    # the web face's "finished since you looked" (found by index, whatever the runs).
    """
    CREATE TABLE answer_tokens (
        token       TEXT PRIMARY KEY,
        request     INTEGER NOT NULL,
        expires     REAL NOT NULL,
        used        REAL
    );
    CREATE INDEX runs_ended ON runs(ended) WHERE ended IS NOT NULL;
    """,
    # 20 (issue 39): what was said, searchable (``procession grep``): a full-text index of the
    # messages' content, tool calls' included (their content names the tool, its input and its
    # output). External content: the text is kept once, in ``messages``; the index holds only
    # its terms, and takes each batch of messages as it is appended, in its transaction
    # (``rows.append``: a trigger inserting them one at a time made a load 3.5 times slower; a
    # message's content is never changed, nor a message deleted). Opening an older workspace
    # indexes the messages it held, in batches (``sqlite._index_said``). PostgreSQL's is an
    # index of its own over the content's ``tsvector`` (``dialect.OWN``).
    """
    CREATE VIRTUAL TABLE messages_search USING fts5(content, content='messages', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2');
    """,
)
#: The migration that made the search index (its messages are indexed as it is applied).
SEARCHED: Final = 20

VERSION: Final = len(MIGRATIONS)
