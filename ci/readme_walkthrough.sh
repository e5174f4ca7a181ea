#!/usr/bin/env bash
# The README followed literally on a clean clone: Quick start (install, main job, optionally the
# test suite) and every command of "Verify your own kernel", run from a separate user repository
# whose mypkg/attn.py is examples/outside_kernel.py's `clean` kernel as `block_attention` and
# whose examples/claims.toml is the README's example. Every step is timed; the script fails if
# any step does. Usage: bash ci/readme_walkthrough.sh [--with-tests] [WORKDIR]
set -uo pipefail
with_tests=0
if [ "${1:-}" = "--with-tests" ]; then with_tests=1; shift; fi
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
log="$work/walkthrough.log"
failed=0
step() {  # step NAME CMD...: run in the current directory, time it, keep going
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$work/$name.out" 2>&1
  local rc=$?
  printf '%-12s exit %-3s %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*" | tee -a "$log"
  if [ "$rc" != 0 ]; then failed=1; tail -15 "$work/$name.out"; fi
}
git clone -q "$src" "$work/blockattn" || exit 2
cd "$work/blockattn"
step install bash ci/install.sh
step main_job python3 -m blockattn run
if [ "$with_tests" = 1 ]; then step tests python3 -m pytest -n 2 -m "not slow"; fi
# "Verify your own kernel", from the user's own repository
user="$work/user"
mkdir -p "$user/mypkg" "$user/examples"
cd "$user"
touch mypkg/__init__.py
{ cat "$work/blockattn/examples/outside_kernel.py"; echo; echo "block_attention = clean"; } \
  > mypkg/attn.py
cp "$work/blockattn/examples/claims.toml" examples/claims.toml
step run blockattn run --provider mypkg.attn:block_attention
step old_dir blockattn run --provider mine=mypkg.attn:block_attention --corpus-only --out OLD_DIR
step gate blockattn gate --provider mine=mypkg.attn:block_attention --baseline OLD_DIR
step bench blockattn bench --smoke --provider mypkg.attn:block_attention
step audit blockattn audit --provider mine=mypkg.attn:block_attention --claims examples/claims.toml
step pytest python3 -m pytest --blockattn-provider mypkg.attn:block_attention -n 2
echo "walkthrough: $([ $failed = 0 ] && echo all steps passed || echo SOME STEP FAILED) ($work)" | tee -a "$log"
exit $failed
