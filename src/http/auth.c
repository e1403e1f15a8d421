/* The checks of auth.h. */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>
#include <strings.h>

#include "auth.h"

static const char *after_scheme(const char *value, const char *scheme) {
        size_t n = strlen(scheme);

        if (strncasecmp(value, scheme, n) != 0 || value[n] != ' ')
                return NULL;
        value += n;
        while (*value == ' ')
                value++;
        return *value ? value : NULL;
}

bool auth_offered_token_ok(const char *authorization, const char *x_access_token, const char *traffic_token,
                           const char *query_token, const char *token) {
        const char *bearer = NULL;

        if (authorization && !(bearer = after_scheme(authorization, "Bearer")))
                bearer = after_scheme(authorization, "token");
        /* Each way the request offers one is tried: an app may send another service's token in one of them (E2B's
         * SDK sends its envd token as X-Access-Token). */
        return auth_token_equal(bearer, token) || auth_token_equal(x_access_token, token) ||
               auth_token_equal(traffic_token, token) || auth_token_equal(query_token, token);
}

bool auth_token_equal(const char *offered, const char *token) {
        unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];

        if (!offered || !token)
                return false;
        SHA256((const unsigned char *) offered, strlen(offered), a);
        SHA256((const unsigned char *) token, strlen(token), b);
        return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

static bool port_valid(const char *s) {
        size_t n = strspn(s, "0123456789");

        return n > 0 && n <= 5 && s[n] == '\0';
}

bool auth_host_name(const char *host, char *buf, size_t size) {
        const char *end, *colon;
        size_t n;

        if (!host || !*host)
                return false;
        if (host[0] == '[') {
                end = strchr(host, ']');
                if (!end || (end[1] != '\0' && (end[1] != ':' || !port_valid(end + 2))))
                        return false;
                host++;
        } else {
                colon = strchr(host, ':');
                if (colon && !port_valid(colon + 1))
                        return false;
                end = colon ? colon : host + strlen(host);
        }
        n = (size_t) (end - host);
        if (n == 0 || n >= size)
                return false;
        memcpy(buf, host, n);
        buf[n] = '\0';
        return true;
}

bool auth_host_allowed(const AuthPolicy *p, const char *host) {
        char name[256];

        if (!auth_host_name(host, name, sizeof name))
                return false;
        for (char **h = p->hosts; h && *h; h++)
                if (strcasecmp(*h, name) == 0)
                        return true;
        return false;
}

bool auth_origin_allowed(const AuthPolicy *p, const char *origin) {
        if (!origin)
                return true;
        for (char **o = p->origins; o && *o; o++)
                if (strcmp(*o, origin) == 0)
                        return true;
        return false;
}
