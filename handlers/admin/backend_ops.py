"""Backend operations on a target, ProxySQL's names: processes, kill, users, create, grant.

They act through the target's own auth profile, so that account must hold the rights;
otherwise the answer is PERMISSION_DENIED naming the missing privilege, with nothing done.
Guard rails beyond the engine's own: only the gateway's accounts' statements may be killed
(unless admin-allow_kill_any), and privileges come from an allowlist; SUPER, FILE, superuser
and their kind only when admin-allow_privileged_grants is on. Each engine does the work in its
own SQL (`target.engine.admin(target)`, backends/engines/admin.py) and has the allowlist; SQLite
targets have neither accounts nor processes: INVALID_ARGUMENT.
"""

from __future__ import annotations

import re
import secrets as random_secrets

from pydantic import Field

from backends import callers
from backends.callers import subject_of_label
from backends.engines.admin import STATEMENT_CHARS, TargetAdmin
from backends.targets import Target, targets_from_runtime
from gateway.errors import InvalidArgument, NotFound, PermissionDenied, Unavailable
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from gateway.variables import Variable
from handlers.admin.shared import AuditTrail

ADMIN_VARIABLES: tuple[Variable, ...] = (
    Variable(
        "admin-allow_kill_any",
        "bool",
        "false",
        "admin_kill_query may cancel statements of any account, not only those of the gateway's auth profiles.",
    ),
    Variable(
        "admin-allow_privileged_grants",
        "bool",
        "false",
        "admin_grant_permissions may grant SUPER, FILE, PROCESS, superuser, pg_read_server_files and the like.",
    ),
)
USERNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
HOST = re.compile(r"^[A-Za-z0-9_.%:-]{1,60}$")
ON = re.compile(r"^(\*|\*\.\*|[A-Za-z0-9_$]{1,64}\.(\*|[A-Za-z0-9_$]{1,64}))$")
MIN_PASSWORD_CHARS = 12


class TargetIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64, description="A MariaDB/MySQL or PostgreSQL target.")


class ShowProcessesIn(TargetIn):
    all: bool = Field(
        default=False, description="Every account's statements the target's account may see, not only the gateway's."
    )
    limit: int = Field(default=100, ge=1, le=1000)


class KillQueryIn(TargetIn):
    process_id: int = Field(
        ge=1, le=2**63 - 1, description="The process (MariaDB thread id, PostgreSQL pid) from admin_show_processes."
    )


class CreateUserIn(TargetIn):
    username: str = Field(description="Letters, digits and _ (at most 32), starting with a letter or _.")
    password: str | None = Field(
        default=None, description=f"At least {MIN_PASSWORD_CHARS} characters; omitted: one is generated and returned once."
    )
    read_only: bool = Field(default=True, description="Grant SELECT on the target's database/schema (and nothing else).")
    host: str = Field(default="%", description="MariaDB/MySQL account host part; ignored by PostgreSQL.")


class GrantIn(TargetIn):
    username: str
    privileges: list[str] = Field(min_length=1, max_length=20, description="e.g. ['SELECT', 'INSERT'], from the allowlist.")
    on: str = Field(description="'*' (the target's database / default schema), '<schema>.*' or '<schema>.<table>'.")
    host: str = Field(default="%", description="MariaDB/MySQL account host part; ignored by PostgreSQL.")


class ProcessOut(ToolOutput):
    process_id: int
    user: str
    host: str
    database: str
    state: str
    time_s: float
    statement: str = Field(description=f"The running statement (first {STATEMENT_CHARS} characters).")
    started_at: float = Field(description="Unix time the statement (PostgreSQL: its transaction) began.")
    gateway_account: bool
    subject: str | None = Field(
        default=None,
        description="The OAuth caller (token subject) whose statement this is; null for a static token or another client.",
    )


class ShowProcessesOut(ToolOutput):
    target_id: str
    processes: list[ProcessOut]
    truncated: bool = False


class KillOut(ToolOutput):
    target_id: str
    process_id: int
    user: str
    statement: str
    killed: bool


class UserOut(ToolOutput):
    username: str
    host: str
    can_login: bool
    attributes: list[str]
    gateway_account: bool


class ListUsersOut(ToolOutput):
    target_id: str
    users: list[UserOut]
    truncated: bool = False


class CreateUserOut(ToolOutput):
    target_id: str
    username: str
    host: str
    password: str | None = Field(description="The generated password, shown this once; null when you gave one.")
    granted: list[str]


class GrantOut(ToolOutput):
    target_id: str
    username: str
    privileges: list[str]
    on: str


def gateway_accounts(ctx: CallContext) -> set[str]:
    return {row["db_username"] for row in ctx.runtime.table("runtime_mcp_auth_profiles") if row.get("db_username")}


class BackendTools:
    def __init__(self, trail: AuditTrail) -> None:
        self.trail = trail

    def _target(self, ctx: CallContext, target_id: str) -> tuple[Target, TargetAdmin]:
        """The target and its engine's administration of it (INVALID_ARGUMENT for an engine without accounts)."""
        targets, skipped = targets_from_runtime(ctx.runtime)
        if target_id in skipped:
            raise Unavailable(f"target {target_id!r} is not serving: {skipped[target_id]}")
        target = targets.get(target_id)
        if target is None:
            raise NotFound(f"no target {target_id!r}; admin.list_targets shows them")
        return target, target.engine.admin(target)

    @tool("admin_show_processes", title="Show running statements", read_only=True)
    def show_processes(self, args: ShowProcessesIn, ctx: CallContext) -> ShowProcessesOut:
        """List statements running on a target now; by default only those of the gateway's own accounts (all=true: every account the target's account may see)."""
        target, admin = self._target(ctx, args.target_id)
        ours = gateway_accounts(ctx)
        with admin.session() as session:
            found = session.processes()
        listed = [
            ProcessOut(
                **{k: v for k, v in vars(p).items() if k != "label"},
                gateway_account=p.user in ours,
                subject=subject_of_label(p.label) or callers.RUNNING.subject(target.target_id, p.process_id),
            )
            for p in found
            if args.all or p.user in ours
        ]
        return ShowProcessesOut(target_id=target.target_id, processes=listed[: args.limit], truncated=len(listed) > args.limit)

    @tool("admin_kill_query", title="Cancel a running statement", read_only=False, destructive=True)
    def kill_query(self, args: KillQueryIn, ctx: CallContext) -> KillOut:
        """Cancel one running statement on a target (its connection stays); only statements of the gateway's accounts unless admin-allow_kill_any=true."""
        target, admin = self._target(ctx, args.target_id)
        with self.trail.audited(ctx, args.model_dump()) as entry, admin.session() as session:
            found = session.process(args.process_id)
            if found is None:
                raise NotFound(f"no running statement with process id {args.process_id} visible on {target.target_id!r}")
            entry.before = {"user": found.user, "statement": found.statement[:200]}
            if found.user not in gateway_accounts(ctx) and not ctx.runtime.var("admin-allow_kill_any"):
                raise PermissionDenied(
                    f"process {args.process_id} runs as {found.user!r}, not one of the gateway's accounts; "
                    "set admin-allow_kill_any=true to kill any account's statements"
                )
            session.kill_query(found)
            entry.after = {"killed": True}
        return KillOut(
            target_id=target.target_id, process_id=args.process_id, user=found.user, statement=found.statement, killed=True
        )

    @tool("admin_list_users", title="List database accounts", read_only=True)
    def list_users(self, args: TargetIn, ctx: CallContext) -> ListUsersOut:
        """List the database accounts (MariaDB users, PostgreSQL roles) of a target, marking the gateway's own."""
        target, admin = self._target(ctx, args.target_id)
        ours = gateway_accounts(ctx)
        with admin.session() as session:
            found = session.accounts()
        return ListUsersOut(
            target_id=target.target_id, users=[UserOut(**vars(a), gateway_account=a.username in ours) for a in found]
        )

    @tool("admin_create_user", title="Create a database account", read_only=False)
    def create_user(self, args: CreateUserIn, ctx: CallContext) -> CreateUserOut:
        """Create a database login on a target, read-only by default (SELECT on its database or schema); a generated password is returned once."""
        target, admin = self._target(ctx, args.target_id)
        _check_names(args.username, args.host)
        if args.password is not None and len(args.password) < MIN_PASSWORD_CHARS:
            raise InvalidArgument(
                f"password must have at least {MIN_PASSWORD_CHARS} characters (or omit it to get one generated)"
            )
        password = args.password or random_secrets.token_urlsafe(18)
        with self.trail.audited(ctx, args.model_dump()) as entry:
            entry.extra_secrets.append(password)
            with admin.session() as session:
                granted = session.create_user(username=args.username, password=password, host=args.host, read_only=args.read_only)
            entry.after = {"username": args.username, "granted": granted}
        return CreateUserOut(
            target_id=target.target_id,
            username=args.username,
            host=args.host if admin.accounts_have_hosts else "",
            password=None if args.password else password,
            granted=granted,
        )

    @tool("admin_grant_permissions", title="Grant privileges", read_only=False, idempotent=True)
    def grant_permissions(self, args: GrantIn, ctx: CallContext) -> GrantOut:
        """Grant privileges from an allowlist to a database account on a target; SUPER, FILE, superuser and the like only when admin-allow_privileged_grants=true."""
        target, admin = self._target(ctx, args.target_id)
        _check_names(args.username, args.host)
        if not ON.match(args.on):
            raise InvalidArgument("on must be '*', '<schema>.*' or '<schema>.<table>' (letters, digits, _ and $)")
        with self.trail.audited(ctx, args.model_dump()) as entry:
            privileges = [" ".join(p.upper().split()) for p in args.privileges]
            allowlist = admin.privileges
            privileged = sorted(p for p in privileges if p in allowlist.privileged)
            unknown = sorted(set(privileges) - allowlist.known)
            if unknown:
                allowed = ", ".join(sorted(allowlist.table_level))
                raise InvalidArgument(
                    f"privilege(s) {', '.join(unknown)} not on the allowlist for {target.engine.name}: {allowed}"
                )
            if privileged and not ctx.runtime.var("admin-allow_privileged_grants"):
                raise PermissionDenied(f"{', '.join(privileged)} is never granted unless admin-allow_privileged_grants=true")
            if args.on == "*.*" and not ctx.runtime.var("admin-allow_privileged_grants"):
                raise PermissionDenied("grants on *.* (every database) need admin-allow_privileged_grants=true")
            role_level = [p for p in privileges if p in allowlist.role_level]
            table_level = [p for p in privileges if p not in role_level]
            with admin.session() as session:
                scope = session.grant(
                    username=args.username,
                    host=args.host,
                    privileges=table_level,
                    on=args.on,
                    role_privileges=role_level,
                )
            entry.after = {"privileges": privileges, "on": scope}
        return GrantOut(target_id=target.target_id, username=args.username, privileges=privileges, on=scope)


def _check_names(username: str, host: str) -> None:
    if not USERNAME.match(username):
        raise InvalidArgument("username must be letters, digits and _ (at most 32), starting with a letter or _")
    if not HOST.match(host):
        raise InvalidArgument("host must be a host name, address or pattern like % or 10.0.%")
