# A container whose init is kernelsupd: it reaps every orphan, runs the kernels of
# /etc/kernelsup/kernelsup.ini (and contexts.d/), and stops them cleanly on SIGTERM.
#   docker build -t kernelsup .
#   docker run -d --name ks kernelsup
#   docker exec ks kernelctl exec default 'print(6 * 7)'
# tests/integration/test-dockerfile.py checks what can be checked without a Docker
# engine: the stages, the files copied, and the libraries the programs need.

FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc libc6-dev make autoconf automake libtool pkg-config \
      libuv1-dev libsystemd-dev libjansson-dev libinih-dev libzmq3-dev libssl-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN autoreconf -fi \
 && ./configure --prefix=/usr --sysconfdir=/etc --localstatedir=/var --runstatedir=/run --disable-werror \
 && make -j"$(nproc)" \
 && make install DESTDIR=/out

FROM debian:12
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libuv1 libsystemd0 libjansson4 libinih1 libssl3 libmicrohttpd12 python3-ipykernel \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr/sbin/kernelsupd /usr/sbin/kernelsupd
COPY --from=build /out/usr/bin/kernelctl /usr/bin/kernelctl
COPY --from=build /out/usr/bin/kernelsup-http /usr/bin/kernelsup-http
COPY --from=build /out/etc/kernelsup /etc/kernelsup
COPY --from=build /out/usr/share/kernelsup /usr/share/kernelsup
COPY --from=build /out/usr/share/man /usr/share/man
COPY --from=build /out/usr/lib/sysusers.d /usr/lib/sysusers.d
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/sbin/kernelsupd", "--config", "/etc/kernelsup/kernelsup.ini"]
