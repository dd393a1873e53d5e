#!/usr/bin/env bash
# Runs a command that must fail: within LIMIT seconds, with a non-zero status, and with output matching REGEX.
# usage: expect_failure.sh LIMIT REGEX command...
set -u
limit=$1; regex=$2; shift 2
start=$(date +%s)
out=$(timeout "$((limit + 30))" "$@" 2>&1); status=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -n 20
echo "status $status after ${elapsed}s (limit ${limit}s)"
if [ "$status" -eq 0 ]; then echo "FAIL: the command succeeded"; exit 1; fi
if [ "$status" -eq 124 ]; then echo "FAIL: the command hung"; exit 1; fi
if [ "$elapsed" -gt "$limit" ]; then echo "FAIL: took ${elapsed}s"; exit 1; fi
if ! echo "$out" | grep -Eq "$regex"; then echo "FAIL: no line matches /$regex/"; exit 1; fi
echo "PASS: failed as expected, naming /$regex/"
