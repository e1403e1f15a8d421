/* Who may ask kernelsup-http anything (pure: no loop, no socket). A request over TCP carries the token; its Host
 * names this server (DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends Host: evil.example); its
 * Origin, when a browser sends one, is one the operator allowed (no CORS by default). Over a Unix socket the peer's
 * uid decides instead (http.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct AuthPolicy {
        const char *token; /* NULL: --no-auth */
        char **hosts;      /* names a Host header may give (without port), NULL-terminated; borrowed */
        char **origins;    /* Origins a browser may come from, exact ("http://localhost:8888"); borrowed */
} AuthPolicy;

/* Whether a request offers token in one of its ways: "Authorization: Bearer T" or "token T", "X-Access-Token: T",
 * "E2B-Traffic-Access-Token: T" (what E2B's SDK sends on every call), the query's token (the caller passes what MHD
 * decoded); any of them that matches will do. Each compared as auth_token_equal does. */
bool auth_offered_token_ok(const char *authorization, const char *x_access_token, const char *traffic_token,
                           const char *query_token, const char *token);

/* Whether offered equals token, in time that depends on neither's content (both are hashed, the hashes compared
 * with CRYPTO_memcmp). NULL offered: false. */
bool auth_token_equal(const char *offered, const char *token);

/* The host part of a Host header ("example.com:8080" -> "example.com", "[::1]:80" -> "::1") into buf; false when
 * it is empty, too long or malformed (a bracket without its pair, a port that is not a number). */
bool auth_host_name(const char *host, char *buf, size_t size);

/* Whether a Host header names this server: its host part is one of policy->hosts, case-insensitively. */
bool auth_host_allowed(const AuthPolicy *p, const char *host);

/* Whether a request with this Origin header (NULL: none, as from curl and SDKs) may go on: none, or one of
 * policy->origins exactly. */
bool auth_origin_allowed(const AuthPolicy *p, const char *origin);
