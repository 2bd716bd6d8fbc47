#!/bin/sh
# Development certificates for the compose stack: a CA and a server certificate
# for the broker, in DIR (default /certs):
#   ca.pem          the development CA: what clients trust (--ca ca.pem)
#   ca.key          its key (stays here; only this script uses it)
#   server.pem      the broker's certificate, signed by the CA, for QUEEN_CERT_HOSTS
#   server.key      its key, readable by the broker's user (nobody) through group 65534
#
# QUEEN_CERT_HOSTS: comma-separated DNS names and IP addresses the server
# certificate names (default: queen,localhost,127.0.0.1,::1 - the broker's compose
# service name and this machine).
#
# Certificates are kept while they are usable, so clients that trust ca.pem go on
# working across restarts: the CA while it has 30 more days; the server
# certificate while it verifies against the CA, has 7 more days and names the same
# hosts. For development only: the CA key lies beside the certificates.
set -eu

dir=${1:-/certs}
hosts=${QUEEN_CERT_HOSTS:-queen,localhost,127.0.0.1,::1}
mkdir -p "$dir"
cd "$dir"

valid_for() { # FILE SECONDS: the certificate in FILE is valid for that much longer
  [ -s "$1" ] && openssl x509 -in "$1" -noout -checkend "$2" >/dev/null 2>&1
}

if [ -s ca.key ] && valid_for ca.pem $((30 * 86400)); then
  echo "dev-certs: keeping the CA in $dir/ca.pem"
else
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=Queen development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca.key -out ca.pem 2>/dev/null
  chmod 600 ca.key
  chmod 644 ca.pem
  rm -f server.pem # signed by the old CA
  echo "dev-certs: made a new CA in $dir/ca.pem"
fi

san=""
old_ifs=$IFS
IFS=,
for h in $hosts; do
  case $h in
    '') ;;
    *[!0-9.]* | *.*.*.*.*) # not a dotted quad: IPv6 if it has a colon, else a name
      case $h in *:*) san="$san,IP:$h" ;; *) san="$san,DNS:$h" ;; esac ;;
    *) san="$san,IP:$h" ;;
  esac
done
IFS=$old_ifs
san=${san#,}
[ -n "$san" ] || { echo "dev-certs: QUEEN_CERT_HOSTS names no host" >&2; exit 2; }

if [ -s server.key ] && valid_for server.pem $((7 * 86400)) &&
   openssl verify -CAfile ca.pem server.pem >/dev/null 2>&1 &&
   [ "$(cat server.hosts 2>/dev/null)" = "$san" ]; then
  echo "dev-certs: keeping the server certificate in $dir/server.pem ($san)"
else
  ext=$(mktemp)
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' "$san" >"$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=queen" \
    -keyout server.key -out server.csr 2>/dev/null
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "$ext" -out server.pem 2>/dev/null
  rm -f server.csr "$ext"
  printf '%s\n' "$san" >server.hosts
  chmod 644 server.pem server.hosts
  echo "dev-certs: made a server certificate in $dir/server.pem ($san)"
fi
# The broker runs as nobody; group 65534 (nogroup) may read the key.
chgrp 65534 server.key 2>/dev/null || true
chmod 640 server.key
