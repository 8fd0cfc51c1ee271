"""The SASL exchange of one connection on a SASL_PLAINTEXT or SASL_SSL listener, as
Kafka's SaslServerAuthenticator runs it, and re-authentication (KIP-368).

Theory of operation. Until authentication completes, the authenticator owns the
connection's frames: it is installed as the connection's `_handle_frame` (an instance
attribute shadowing the method), and removed when the exchange completes, so an
authenticated connection handles its requests exactly as a PLAINTEXT one does, with no
check per request. Before the handshake only ApiVersions (once) and SaslHandshake are
read; anything else closes the connection without an answer, as Kafka does. A v1
handshake means the tokens come in SaslAuthenticate requests; any other request then is
answered with ILLEGAL_SASL_STATE in its own shape and the connection closed. A v0
handshake means raw tokens: each frame is a token, each challenge goes back as a bare
size-prefixed frame (PLAIN's success is an empty one).

A failed authentication (SASL_AUTHENTICATION_FAILED with Kafka's message, or
UNSUPPORTED_SASL_MECHANISM for a handshake) is counted, and its answer sent and the
connection closed after connection_failed_authentication_delay_ms; nothing more is read
meanwhile.

Sessions (connections_max_reauth_ms > 0): the final SaslAuthenticate answer (v1+) carries
session_lifetime_ms; a timer at the session's end swaps in `_expired_frame`, which closes
the connection at its next request unless that is a SaslHandshake starting a
re-authentication. A client re-authenticates by sending SaslHandshake on its
authenticated connection: the dispatch table's handler (scram_api.handle_sasl_handshake)
hands it to `begin_reauthentication`, which installs the authenticator again for the
SaslAuthenticate requests that follow (other requests are still served until the session
ends). The mechanism and the principal must stay the same.
"""

from __future__ import annotations

import asyncio
import struct
import time
from datetime import timedelta
from typing import Any

from groupcoord.protocol.api import (
    ApiKey,
    Request,
    RequestError,
    UnsupportedVersion,
    build,
    decode_request,
    error_response,
    response_types,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.header import RequestHeader, peek_fixed

from ..observability.logging import get_logger
from ..security.oauthbearer import OAuthBearerServer
from ..security.plain import authenticate_plain
from ..security.scram import MECHANISMS, SaslFailure, ScramServer

log = get_logger("groupcoord.sasl")

_SIZE = struct.Struct(">i")
_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_HANDSHAKE_KEY = _HANDSHAKE.to_bytes(2, "big")
# Kafka's minimum time between the starts of two re-authentications.
REAUTH_MIN_INTERVAL_S = 1.0

# States of the exchange.
_HANDSHAKE_OR_VERSIONS = 0  # nothing yet, or ApiVersions answered with an error
_HANDSHAKE_ONLY = 1  # ApiVersions answered
_AUTHENTICATE_STATE = 2  # mechanism chosen, tokens expected
_COMPLETE = 3
_FAILED = 4


def _generic_failure(mechanism: str, reauth: bool) -> str:
    during = "re-authentication" if reauth else "authentication"
    return (
        f"Authentication failed during {during} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class SaslAuthenticator:
    def __init__(self, connection: Any, services: Any, listener: str) -> None:
        """`connection`: a server/connection.py Connection (Any: that module imports this
        one); `services`: the server's AuthServices; `listener`: the listener's name."""
        self.connection = connection
        self.services = services
        self.listener = listener
        self.state = _HANDSHAKE_OR_VERSIONS
        self.raw_tokens = False
        self.mechanism = ""
        self.reauthenticating = False
        self._mechanism_server: Any = None
        self._authenticate_version = 0
        self._session_end: asyncio.TimerHandle | None = None
        self._reauth_started = 0.0
        self.expired = False
        # Re-authentication: the mechanism of the session, and a different one asked for
        # (Kafka fails the next token then).
        self._original_mechanism = ""
        self._reauth_bad_mechanism: str | None = None
        self._frame_bytes_max = connection.decoder.frame_bytes_max
        connection.decoder.frame_bytes_max = min(self._frame_bytes_max, services.receive_bytes_max)
        connection.context.sasl = self
        connection._handle_frame = self.handle_frame  # type: ignore[method-assign]

    # frames while authenticating ---------------------------------------------------------

    def handle_frame(self, frame: bytes) -> None:
        started = time.perf_counter()
        if self.state == _FAILED:
            return  # the delayed close is coming; nothing more is read
        if self.state == _AUTHENTICATE_STATE and self.raw_tokens:
            self._token(frame, None, started)
            return
        connection = self.connection
        try:
            api_key, _version, _correlation = peek_fixed(frame)
        except Exception:
            self._close_silently("unreadable request before authentication")
            return
        if self.reauthenticating and api_key not in (_HANDSHAKE, _AUTHENTICATE):
            if self.expired:
                self._close_expired()
                return
            # Re-authenticating: the session is still valid, its requests still served.
            type(connection)._handle_frame(connection, frame)
            return
        try:
            request = decode_request(frame, connection.server.supported_versions)
        except UnsupportedVersion as e:
            if e.header.api_key == _API_VERSIONS and self.state == _HANDSHAKE_OR_VERSIONS:
                connection._answer_unsupported(e, started)  # state unchanged: may retry
            else:
                self._close_silently(f"unsupported version of api {e.header.api_key}")
            return
        except RequestError as e:
            self._close_silently(f"malformed request during SASL handshake: {e}")
            return
        if self.state == _AUTHENTICATE_STATE:
            if api_key == _AUTHENTICATE:
                self._authenticate_version = request.api_version
                self._token(request.body.auth_bytes, request, started)
                return
            # Kafka: the request's own response with ILLEGAL_SASL_STATE, then the close.
            response = error_response(api_key, request.api_version, ErrorCode.ILLEGAL_SASL_STATE)
            self._fail(request.header, response, started, "request during SASL authentication")
            return
        if api_key == _API_VERSIONS and self.state == _HANDSHAKE_OR_VERSIONS:
            handler = connection.server.handlers[_API_VERSIONS]
            response = handler(connection.context, request)
            self.state = _HANDSHAKE_ONLY
            connection._queue(request.header, started, response)
            return
        if api_key == _HANDSHAKE:
            response = self.handshake(request)
            if response.error_code:
                self._fail(request.header, response, started, "unsupported mechanism")
            else:
                connection._queue(request.header, started, response)
            return
        what = f"Unexpected Kafka request of type {api_key} during SASL handshake"
        if self.state == _HANDSHAKE_OR_VERSIONS:
            what = (
                "Invalid request, potential reasons: kafka client configured with the wrong "
                "security protocol, it does not support KIP-43 or it is not a kafka client."
            )
        self._close_silently(what)

    def handshake(self, request: Request) -> Any:
        """Answer a SaslHandshake: the enabled mechanisms, and NONE when the asked one is
        among them (the exchange then expects its tokens), else UNSUPPORTED_SASL_MECHANISM."""
        m = response_types(_HANDSHAKE, request.api_version)
        mechanism = request.body.mechanism
        enabled = self.services.mechanisms
        if mechanism not in enabled:
            return build(
                m.SaslHandshakeResponse,
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                mechanisms=enabled,
            )
        if self.reauthenticating and mechanism != self._original_mechanism:
            self._reauth_bad_mechanism = mechanism
        self.mechanism = mechanism
        self.raw_tokens = request.api_version == 0
        if mechanism in MECHANISMS:
            self._mechanism_server = ScramServer(mechanism, self.services.scram_lookup(mechanism))
        elif mechanism == "OAUTHBEARER":
            self._mechanism_server = OAuthBearerServer(self.services.oauth)
        else:
            self._mechanism_server = None
        self.state = _AUTHENTICATE_STATE
        return build(m.SaslHandshakeResponse, error_code=ErrorCode.NONE, mechanisms=enabled)

    def _token(self, token: bytes, request: Request | None, started: float) -> None:
        """Evaluate one token of the chosen mechanism; answer, complete or fail."""
        principal_before = self.connection.context.principal
        try:
            bad = self._reauth_bad_mechanism
            if bad is not None:
                raise SaslFailure(
                    "mechanism changed",
                    f"SASL mechanism '{bad}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self._original_mechanism}'",
                )
            if self.mechanism == "PLAIN":
                user = authenticate_plain(token, self.services.plain_users)
                challenge = b""
                complete = True
            else:
                server = self._mechanism_server
                challenge = server.evaluate(token)
                complete = server.complete
                user = server.user
            if complete and self.reauthenticating and f"User:{user}" != principal_before:
                raise SaslFailure(
                    "principal changed",
                    f"Cannot change principals during re-authentication from "
                    f"{principal_before}: User:{user}",
                )
        except SaslFailure as e:
            message = e.client_message or _generic_failure(self.mechanism, self.reauthenticating)
            log.info(
                "authentication failed",
                peer=self.connection.peer,
                listener=self.listener,
                mechanism=self.mechanism,
                reason=str(e),
            )
            if request is None:
                self._fail(None, None, started, str(e))
            else:
                m = response_types(_AUTHENTICATE, request.api_version)
                response = build(
                    m.SaslAuthenticateResponse,
                    error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                    error_message=message,
                    auth_bytes=b"",
                )
                self._fail(request.header, response, started, str(e))
            return
        lifetime_ms = self._complete(user) if complete else 0
        if request is None:
            if challenge or complete:
                self.connection._send_raw(_SIZE.pack(len(challenge)) + challenge)
            return
        m = response_types(_AUTHENTICATE, request.api_version)
        response = build(
            m.SaslAuthenticateResponse,
            error_code=ErrorCode.NONE,
            error_message=None,
            auth_bytes=challenge,
            session_lifetime=timedelta(milliseconds=lifetime_ms),
        )
        self.connection._queue(request.header, started, response)

    def _complete(self, user: str | None) -> int:
        """Authentication done: the principal is set, the connection's own frame handling
        restored, the session timed. Returns the session lifetime (0: none)."""
        connection = self.connection
        services = self.services
        connection.context.principal = f"User:{user}"
        connection.decoder.frame_bytes_max = self._frame_bytes_max
        connection.__dict__.pop("_handle_frame", None)
        reauth = self.reauthenticating
        self.state = _COMPLETE
        self.reauthenticating = False
        self.expired = False
        self._original_mechanism = self.mechanism
        connection.server.metrics.authentications.labels(
            self.listener, self.mechanism, "reauthenticated" if reauth else "authenticated"
        ).inc()
        if not reauth:
            log.debug(
                "authenticated",
                peer=connection.peer,
                listener=self.listener,
                mechanism=self.mechanism,
                principal=connection.context.principal,
            )
        if self._session_end is not None:
            self._session_end.cancel()
            self._session_end = None
        lifetime_ms = services.reauth_ms
        if lifetime_ms <= 0:
            return 0
        # An OAUTHBEARER session ends with its token, as Kafka's (credential expiration).
        expiry_ms = getattr(self._mechanism_server, "expiry_ms", None)
        if expiry_ms is not None:
            lifetime_ms = max(min(lifetime_ms, expiry_ms - int(time.time() * 1000)), 0)
        loop = asyncio.get_running_loop()
        self._session_end = loop.call_later(lifetime_ms / 1000, self._expire)
        # v0 clients get no lifetime, but their session ends all the same (Kafka).
        return lifetime_ms if self._authenticate_version >= 1 or self.raw_tokens else 0

    # sessions ----------------------------------------------------------------------------

    def _expire(self) -> None:
        """The session ended: the next request closes the connection unless it starts a
        re-authentication."""
        self._session_end = None
        if self.connection.closed:
            return
        self.expired = True
        if self.state == _COMPLETE and not self.reauthenticating:
            self.connection._handle_frame = self._expired_frame  # type: ignore[method-assign]

    def _expired_frame(self, frame: bytes) -> None:
        """The connection's frames once its session ended: a SaslHandshake may start a
        re-authentication (the dispatch handler's call); anything else closes it."""
        if frame[:2] == _HANDSHAKE_KEY:
            connection = self.connection
            connection.__dict__.pop("_handle_frame", None)
            connection._handle_frame(frame)
            if not self.reauthenticating and not connection.closed:
                self._close_expired()  # the handshake was refused: the session is over
            return
        self._close_expired()

    def _close_expired(self) -> None:
        self.connection.server.metrics.connection_errors.labels("session_expired").inc()
        log.info("closing connection: SASL session expired", peer=self.connection.peer)
        self.connection.close()

    def begin_reauthentication(self, request: Request) -> Any:
        """A SaslHandshake on an authenticated connection (the dispatch handler's call):
        starts a re-authentication when sessions expire and the last one started over a
        second ago (Kafka's rules); else None (the caller answers ILLEGAL_SASL_STATE)."""
        now = time.monotonic()
        if (
            self.services.reauth_ms <= 0
            or request.api_version < 1
            or self.state != _COMPLETE
            or now - self._reauth_started < REAUTH_MIN_INTERVAL_S
        ):
            return None
        self._reauth_started = now
        self.reauthenticating = True
        self._reauth_bad_mechanism = None
        self._original_mechanism = self.mechanism
        self._frame_bytes_max = self.connection.decoder.frame_bytes_max
        response = self.handshake(request)
        if response.error_code:
            # Kafka fails the re-authentication: the answer goes out, the connection closes
            # after the failed-authentication delay.
            self.reauthenticating = False
            self.state = _FAILED
            connection = self.connection
            connection.server.metrics.failed_authentications.labels(self.listener).inc()
            connection._handle_frame = self._ignore_frame  # type: ignore[method-assign]
            asyncio.get_running_loop().call_later(self.services.failed_delay_s, connection.close)
            return response
        connection = self.connection
        connection._handle_frame = self.handle_frame  # type: ignore[method-assign]
        return response

    # endings -----------------------------------------------------------------------------

    def _ignore_frame(self, frame: bytes) -> None:
        """A failed connection's frames, until its delayed close."""

    def _close_silently(self, why: str) -> None:
        """Kafka closes without an answer (not an authentication failure: no delay)."""
        self.state = _FAILED
        self.connection._fail("sasl_invalid_request", why)

    def _fail(self, header: RequestHeader | None, response: Any, started: float, why: str) -> None:
        """Count the failure; after the delay, send `response` (if any) and close."""
        connection = self.connection
        self.state = _FAILED
        connection.server.metrics.failed_authentications.labels(self.listener).inc()

        def finish() -> None:
            if connection.closed:
                return
            if header is not None:
                connection._queue(header, started, response)
            connection.close()

        delay = self.services.failed_delay_s
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, finish)
        else:
            finish()

    def connection_lost(self) -> None:
        if self._session_end is not None:
            self._session_end.cancel()
            self._session_end = None
