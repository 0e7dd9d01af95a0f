#!/usr/bin/env bash
# Goal: a host-only user of the engine (an executable that links kvtier_engine_core and the memory
# tiers, not kvtier_engine) links neither liburing nor hiredis nor libipsec-mb nor libssl, and
# carries no code of the SSD tier, the remote tier or the Linux Env's io_uring queue; the check
# fails as soon as someone makes the core depend on them again.
# Method: readelf -d lists the executable's NEEDED libraries and nm -C its symbols; both are
# matched against the libraries and symbol names of the SSD and remote tiers. The symbol patterns
# are first checked against the static libraries that do hold those tiers (kvtier_env,
# kvtier_tier_ssd, kvtier_tier_remote, kvtier_tier_redis), so a pattern that matches nothing
# cannot pass vacuously. libcrypto is allowed: the core's SHA-256 (core/sha256.h) uses it.
# Usage: host_only_deps_test.sh <host-only executable> <libkvtier_env.a> <libkvtier_tier_ssd.a>
#        <libkvtier_tier_remote.a> <libkvtier_tier_redis.a>
set -u
if [[ $# -ne 5 ]]; then
  echo "usage: $0 <host-only executable> <libkvtier_env.a> <libkvtier_tier_ssd.a>" \
       "<libkvtier_tier_remote.a> <libkvtier_tier_redis.a>" >&2
  exit 2
fi
EXE="$1"
ENV_LIB="$2"
SSD_LIB="$3"
REMOTE_LIB="$4"
REDIS_LIB="$5"
for f in "$EXE" "$ENV_LIB" "$SSD_LIB" "$REMOTE_LIB" "$REDIS_LIB"; do
  if [[ ! -f "$f" ]]; then
    echo "FAIL: $f does not exist (build it first)" >&2
    exit 1
  fi
done

NEEDED_BANNED='lib(uring|hiredis|hiredis_ssl|IPSec_MB|ssl)\.so'
# Symbols of io_uring and hiredis (C names), libipsec-mb, and the classes of the SSD tier, the
# remote tier and the io_uring queue (demangled C++ names).
URING_SYMS='(^| )io_uring_[a-z_]+'
HIREDIS_SYMS='(^| )redis[A-Z][A-Za-z]+'
IPSEC_SYMS='(^| )(IMB_|imb_)[A-Za-z_]+'
SSD_CLASSES='kvtier::(SsdTier|SsdTierAdapter|ssd::IoWorker)::'
REMOTE_CLASSES='kvtier::(RemoteTierAdapter|CircuitBreaker)::'
REDIS_CLASSES='kvtier::(RedisStore|RedisConnection)::'

fail=0
# The patterns find what they are meant to find where it is.
check_present() {  # <archive> <pattern> <what>
  if ! nm -C "$1" 2>/dev/null | grep -Eq "$2"; then
    echo "FAIL: pattern for $3 matches nothing in $1: the check below would be vacuous" >&2
    fail=1
  fi
}
check_present "$ENV_LIB" "$URING_SYMS" "io_uring calls"
check_present "$SSD_LIB" "$SSD_CLASSES" "the SSD tier"
check_present "$REDIS_LIB" "$HIREDIS_SYMS" "hiredis calls"
check_present "$REDIS_LIB" "$REDIS_CLASSES" "the Redis store"
check_present "$REMOTE_LIB" "$REMOTE_CLASSES" "the remote tier"

needed=$(readelf -d "$EXE" | grep -F '(NEEDED)')
if [[ -z "$needed" ]]; then
  echo "FAIL: readelf -d $EXE lists no NEEDED entry (not a dynamic executable?)" >&2
  fail=1
fi
if bad=$(grep -E "$NEEDED_BANNED" <<<"$needed"); then
  echo "FAIL: the host-only executable needs a library of the SSD or remote tier:" >&2
  echo "$bad" >&2
  fail=1
fi

syms=$(nm -C "$EXE")
if [[ -z "$syms" ]]; then
  echo "FAIL: nm -C $EXE lists no symbol (stripped?)" >&2
  fail=1
fi
for p in "$URING_SYMS" "$HIREDIS_SYMS" "$IPSEC_SYMS" "$SSD_CLASSES" "$REMOTE_CLASSES" \
         "$REDIS_CLASSES"; do
  bad=$(grep -E "$p" <<<"$syms" | head -5)
  if [[ -n "$bad" ]]; then
    echo "FAIL: the host-only executable holds symbols matching '$p':" >&2
    echo "$bad" >&2
    fail=1
  fi
done

if [[ $fail -eq 0 ]]; then
  echo "OK: $(basename "$EXE") needs $(grep -oE '\[[^]]+\]' <<<"$needed" | tr -d '[]' | tr '\n' ' ')"
fi
exit $fail
