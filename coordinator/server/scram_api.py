"""SASL requests outside the authentication exchange, and the SCRAM credential APIs
(KIP-554). The exchange itself is sasl_auth.py's: these handlers see only what comes
after it, or what comes on a listener without SASL."""

from __future__ import annotations

from collections import Counter
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..observability.logging import get_logger
from ..security.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISM_CODES,
    MECHANISM_NAMES,
    credential_from_salted_password,
)
from ..topics.access import ALTER, DENIED_MESSAGES, DESCRIBE, allowed_cluster
from .context import GroupContext

log = get_logger("groupcoord.scram")


def handle_sasl_handshake(ctx: GroupContext, request: Request) -> Any:
    """Emits a re-authentication's handshake answer (KIP-368) on an authenticated SASL
    connection whose session expires (sasl_auth.begin_reauthentication); otherwise
    ILLEGAL_SASL_STATE, as Kafka answers after authentication and on listeners without
    SASL."""
    if ctx.sasl is not None:
        response = ctx.sasl.begin_reauthentication(request)
        if response is not None:
            return response
    m = response_types(ApiKey.SASL_HANDSHAKE, request.api_version)
    return build(m.SaslHandshakeResponse, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=())


def handle_sasl_authenticate(ctx: GroupContext, request: Request) -> Any:
    """Emits ILLEGAL_SASL_STATE: a SaslAuthenticate outside an exchange (the exchange's
    own are read by sasl_auth.py)."""
    m = response_types(ApiKey.SASL_AUTHENTICATE, request.api_version)
    return build(
        m.SaslAuthenticateResponse,
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
    )


def handle_describe_user_scram_credentials(ctx: GroupContext, request: Request) -> Any:
    """Emits each asked user's mechanisms and iterations (never salts or keys); no users
    asked: every user. Errors per user: RESOURCE_NOT_FOUND (no credential),
    DUPLICATE_RESOURCE (asked twice); with an authorizer CLUSTER_AUTHORIZATION_FAILED (top
    level) without DESCRIBE on the cluster."""
    m = response_types(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version)
    if ctx.authorizer.enabled and not allowed_cluster(
        ctx, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, DESCRIBE
    ):
        return build(
            m.DescribeUserScramCredentialsResponse,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message=DENIED_MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED],
            results=(),
        )
    store = ctx.security.scram
    asked = request.body.users
    names = [u.name for u in asked] if asked else store.users()
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(
                build(
                    m.DescribeUserScramCredentialsResult,
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice "
                    f"in a single request: {name}",
                )
            )
            continue
        mechanisms = store.mechanisms(name)
        if not mechanisms:
            results.append(
                build(
                    m.DescribeUserScramCredentialsResult,
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message="Attempt to describe a user credential that does not "
                    f"exist: {name}",
                )
            )
            continue
        infos = tuple(
            build(m.CredentialInfo, mechanism=MECHANISM_CODES[mech], iterations=c.iterations)
            for mech, c in sorted(mechanisms.items())
        )
        results.append(
            build(
                m.DescribeUserScramCredentialsResult,
                user=name,
                error_code=ErrorCode.NONE,
                error_message=None,
                credential_infos=infos,
            )
        )
    return build(
        m.DescribeUserScramCredentialsResponse,
        error_code=ErrorCode.NONE,
        error_message=None,
        results=tuple(results),
    )


def handle_alter_user_scram_credentials(ctx: GroupContext, request: Request) -> Any:
    """Upserts (StoredKey and ServerKey derived from the client's SaltedPassword) and
    deletes credentials, persisted before the answer; one result per user. Errors per
    user, the first one found: DUPLICATE_RESOURCE (the user more than once in the
    request), UNACCEPTABLE_CREDENTIAL (empty name, iterations outside 4096-16384),
    UNSUPPORTED_SASL_MECHANISM (not 1 or 2), RESOURCE_NOT_FOUND (deleting a credential
    that does not exist); UNKNOWN_SERVER_ERROR when the file cannot be written; with an
    authorizer CLUSTER_AUTHORIZATION_FAILED for every user without ALTER on the cluster
    (nothing altered)."""
    m = response_types(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version)
    store = ctx.security.scram
    body = request.body
    order = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    if ctx.authorizer.enabled and not allowed_cluster(
        ctx, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ALTER
    ):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return build(
            m.AlterUserScramCredentialsResponse,
            results=tuple(
                build(
                    m.AlterUserScramCredentialsResult,
                    user=name,
                    error_code=denied,
                    error_message=DENIED_MESSAGES[denied],
                )
                for name in dict.fromkeys(order)
            ),
        )
    counts = Counter(order)
    errors: dict[str, tuple[ErrorCode, str]] = {}

    def check(name: str, code: int) -> bool:
        if name in errors:
            return False
        if counts[name] > 1:
            errors[name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        elif not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif code not in MECHANISM_NAMES:
            errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        return name not in errors

    deletions = []
    for d in body.deletions:
        if not check(d.name, d.mechanism):
            continue
        mechanism = MECHANISM_NAMES[d.mechanism]
        if store.get(d.name, mechanism) is None:
            errors[d.name] = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
            continue
        deletions.append((d.name, mechanism))
    upserts = []
    for u in body.upsertions:
        if not check(u.name, u.mechanism):
            continue
        if u.iterations < ITERATIONS_MIN:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            continue
        if u.iterations > ITERATIONS_MAX:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            continue
        mechanism = MECHANISM_NAMES[u.mechanism]
        credential = credential_from_salted_password(
            mechanism, u.salt, u.salted_password, u.iterations
        )
        upserts.append((u.name, mechanism, credential))
    if deletions or upserts:
        try:
            store.apply(upserts, deletions)
        except (OSError, ValueError) as e:
            log.error("cannot store SCRAM credentials", error=str(e))
            for name in [d[0] for d in deletions] + [u[0] for u in upserts]:
                errors.setdefault(name, (ErrorCode.UNKNOWN_SERVER_ERROR, str(e)))
        else:
            log.info(
                "SCRAM credentials altered",
                upserted=sorted({u[0] for u in upserts}),
                deleted=sorted({d[0] for d in deletions}),
            )
    results = []
    for name in dict.fromkeys(order):
        error, message = errors.get(name, (ErrorCode.NONE, None))
        results.append(
            build(
                m.AlterUserScramCredentialsResult,
                user=name,
                error_code=error,
                error_message=message,
            )
        )
    return build(m.AlterUserScramCredentialsResponse, results=tuple(results))
