# Sourced by ./quickstart and ./run-tests: installs the Debian packages the
# project needs when they are missing. Needs root (or sudo) only when something
# is missing.

# Build: compiler, autotools and the six libraries. Run: Debian's ipykernel.
KS_BUILD_PKGS="gcc make autoconf automake libtool pkg-config libuv1-dev libsystemd-dev libjansson-dev
libinih-dev libzmq3-dev libssl-dev libmicrohttpd-dev python3-ipykernel python3-jupyter-client"
# Tests: the systemd container recipe, process tools, matplotlib for plots; building and linting
# the Debian package (tests/systemd/test-package.py); the OpenMetrics parser (test-metrics.py); pip for
# test-preload.py's offline `pip install --user`.
KS_TEST_PKGS="systemd systemd-container dbus util-linux procps iproute2 python3-matplotlib python3-numpy clang-format
binutils dpkg-dev debhelper devscripts lintian python3-prometheus-client python3-pip jupyter-console python3-yaml"

ks_install_missing() {
        local missing=() p
        for p in "$@"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
        done
        [ ${#missing[@]} -eq 0 ] && return 0
        echo "Installing missing Debian packages: ${missing[*]}"
        local sudo=""
        if [ "$(id -u)" -ne 0 ]; then
                command -v sudo >/dev/null || { echo "error: need root to install: ${missing[*]}" >&2; return 1; }
                sudo=sudo
        fi
        $sudo apt-get update -q >/dev/null || true
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# Configures and builds in $1 (a directory below the source tree) with extra configure flags.
ks_build() {
        local dir=$1; shift
        local src; src=$(pwd)
        if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
                autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
        fi
        mkdir -p "$dir"
        ( cd "$dir" && { [ -f Makefile ] || "$src/configure" -q "$@"; } && make -s -j"$(nproc)" )
}

# Fuzzing (./run-tests, make fuzz): clang, and its libFuzzer runtime where that is a
# package of its own (libclang-rt-NN-dev on Debian 12 and later).
ks_install_fuzz() {
        ks_install_missing clang || return 1
        local probe; probe=$(mktemp -d) || return 1
        printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' >"$probe/f.c"
        if ! clang -fsanitize=fuzzer,address,undefined "$probe/f.c" -o "$probe/f" 2>/dev/null; then
                ks_install_missing "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev" || { rm -rf "$probe"; return 1; }
        fi
        rm -rf "$probe"
}

# The real kernels of tests/integration/test-kernels.py, installed into $1 (a cache below the build
# directory): Debian's xeus-python (xpython) and IRkernel (r-cran-irkernel), and tslab (npm, JavaScript and
# TypeScript) with its kernelspecs in $1/npm/prefix/share/jupyter. Each outcome goes to $1/NAME.status,
# "ok" or "skip: WHY", which the test reads: a kernel that cannot be installed is a skip, never a failure.
KS_TSLAB_VERSION=1.0.22
KS_IJAVASCRIPT_VERSION=5.2.1
ks_install_kernels() {
        local cache=$1 log
        mkdir -p "$cache" || return 1
        log="$cache/install.log"
        : >"$log"
        if ks_install_missing xpython >>"$log" 2>&1 && [ -x /usr/bin/xpython ]; then
                echo ok >"$cache/xpython.status"
        else
                echo "skip: the Debian package xpython could not be installed (see $log)" >"$cache/xpython.status"
        fi
        if ks_install_missing r-cran-irkernel >>"$log" 2>&1 && [ -f /usr/share/jupyter/kernels/ir/kernel.json ]; then
                echo ok >"$cache/ir.status"
        else
                echo "skip: the Debian package r-cran-irkernel could not be installed (see $log)" >"$cache/ir.status"
        fi
        local npm="$cache/npm" status
        status="skip: tslab $KS_TSLAB_VERSION could not be installed from npm (see $log)"
        # Nested: tslab finds @types/node (console, process, ...) only below its own node_modules or the kernel's
        # cwd, and npm would otherwise hoist it out of tslab's.
        if [ -x "$npm/node_modules/.bin/tslab" ] && [ -f "$npm/prefix/share/jupyter/kernels/tslab/kernel.json" ] &&
                [ -f "$npm/node_modules/tslab/node_modules/@types/node/package.json" ] &&
                grep -q "\"version\": \"$KS_TSLAB_VERSION\"" "$npm/node_modules/tslab/package.json" 2>/dev/null; then
                status=ok
        elif { command -v npm >/dev/null || ks_install_missing nodejs npm >>"$log" 2>&1; } &&
                npm install --prefix "$npm" --no-audit --no-fund --install-strategy=nested "tslab@$KS_TSLAB_VERSION" >>"$log" 2>&1 &&
                "$npm/node_modules/.bin/tslab" install --python /usr/bin/python3 --binary "$npm/node_modules/.bin/tslab" \
                        --prefix "$npm/prefix" >>"$log" 2>&1; then
                status=ok
        fi
        echo "$status" >"$cache/tslab.status"
        ks_install_ijavascript "$cache" "$log"
}

# ijavascript (npm, with its zeromq addon linked against Debian's libzmq: node-gyp needs a C++ toolchain, make and
# python). Its kernelspec is written as `ijsinstall --spec-path=full` would (ijsinstall itself needs a
# jupyter-kernelspec command Debian's jupyter lacks) into $cache/ijs/prefix/share/jupyter/kernels/ijavascript.
ks_install_ijavascript() {
        local cache=$1 log=$2 ijs="$1/ijs" spec status
        spec="$ijs/prefix/share/jupyter/kernels/ijavascript"
        status="skip: ijavascript $KS_IJAVASCRIPT_VERSION could not be installed from npm (see $log)"
        if grep -q "\"version\": \"$KS_IJAVASCRIPT_VERSION\"" "$ijs/node_modules/ijavascript/package.json" 2>/dev/null &&
                [ -f "$spec/kernel.json" ]; then
                status=ok
        elif { command -v npm >/dev/null || ks_install_missing nodejs npm >>"$log" 2>&1; } &&
                ks_install_missing g++ make python3 pkg-config libzmq3-dev >>"$log" 2>&1 &&
                npm_config_zmq_external=true npm install --prefix "$ijs" --no-audit --no-fund \
                        "ijavascript@$KS_IJAVASCRIPT_VERSION" >>"$log" 2>&1 &&
                { node -e "require('$ijs/node_modules/zeromq')" >>"$log" 2>&1 ||
                        # npm 11 skips install scripts it was not told to allow: build the addon then.
                        { (cd "$ijs" && npm_config_zmq_external=true npm rebuild zeromq --foreground-scripts) >>"$log" 2>&1 &&
                                node -e "require('$ijs/node_modules/zeromq')" >>"$log" 2>&1; }; } && mkdir -p "$spec" &&
                printf '{"argv": ["%s", "%s", "--hide-undefined", "{connection_file}", "--protocol=5.0"], %s}\n' \
                        "$(command -v node)" "$ijs/node_modules/ijavascript/lib/kernel.js" \
                        '"display_name": "JavaScript (Node.js)", "language": "javascript"' >"$spec/kernel.json"; then
                status=ok
        fi
        echo "$status" >"$cache/ijavascript.status"
}

# The stock Node clients the HTTP front end's tests drive (tests/integration/test-http-e2b.py: E2B's
# @e2b/code-interpreter, unchanged, and the core SDK `e2b` it needs, pinned too: its debug mode and the URLs it builds
# are the core's), exact versions, npm-installed into $1/node-clients; the outcome goes to
# $1/node-clients.status, "ok" or "skip: WHY", which those tests read: a client that cannot be installed is a
# skip, never a failure. The driver scripts require() them from $1/node-clients/node_modules.
KS_NODE_CLIENTS="@e2b/code-interpreter@2.8.0 e2b@2.51.0"
ks_install_node_clients() {
        local cache=$1 dir="$1/node-clients" log="$1/node-clients.log" spec status=ok
        mkdir -p "$dir" || return 1
        : >"$log"
        for spec in $KS_NODE_CLIENTS; do
                grep -q "\"version\": \"${spec##*@}\"" "$dir/node_modules/${spec%@*}/package.json" 2>/dev/null || status=
        done
        if [ -z "$status" ]; then
                status="skip: $KS_NODE_CLIENTS could not be installed from npm (see $log)"
                if { command -v npm >/dev/null || ks_install_missing nodejs npm >>"$log" 2>&1; } &&
                        npm install --prefix "$dir" --no-audit --no-fund --save-exact $KS_NODE_CLIENTS >>"$log" 2>&1; then
                        status=ok
                fi
        fi
        echo "$status" >"$cache/node-clients.status"
}
