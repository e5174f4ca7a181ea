#!/usr/bin/env bash
# The README followed literally on a clean clone. The steps are the README's own code blocks:
# every ```bash block right after a `<!-- walkthrough: WHERE -->` line, one step per command
# line, so this script cannot drift from the text. WHERE is `clone` (run in a fresh clone of
# this repository, as "Install" and "The main job" say) or `user` (run in a separate, empty user
# repository beside the clone, as "Verify your own kernel" says: it copies only what the README
# tells the user to copy). A block tagged `clone, slow` runs only with --with-tests. Every step
# is timed; the script fails if any step does, or if the README has no marked block.
# Usage: bash ci/readme_walkthrough.sh [--with-tests] [WORKDIR]
set -uo pipefail
with_tests=0
if [ "${1:-}" = "--with-tests" ]; then with_tests=1; shift; fi
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
log="$work/walkthrough.log"
: > "$log"
failed=0
n=0
step() {  # step DIR CMD: run CMD (one README line) with bash in DIR, time it, keep going
  local dir=$1 cmd=$2
  n=$((n + 1))
  local t0=$SECONDS
  (cd "$dir" && bash -c "$cmd") > "$work/step$n.out" 2>&1
  local rc=$?
  printf '%-6s %2d  exit %-3s %4d s  %s\n' "${dir##*/}" "$n" "$rc" $((SECONDS - t0)) "$cmd" \
    | tee -a "$log"
  if [ "$rc" != 0 ]; then failed=1; tail -15 "$work/step$n.out"; fi
}
# WHERE<TAB>command, one per line (continuation lines joined), from the README of the clone
extract() {
  python3 - "$1" "$with_tests" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
with_tests = sys.argv[2] == "1"
blocks = re.findall(r"^<!-- walkthrough: ([a-z, ]+) -->\n```bash\n(.*?)^```", text, re.M | re.S)
if not blocks:
    sys.exit("readme_walkthrough: no <!-- walkthrough: ... --> bash block in the README")
for tags, body in blocks:
    tags = {t.strip() for t in tags.split(",")}
    where = "user" if "user" in tags else "clone"
    if "slow" in tags and not with_tests:
        continue
    for line in re.sub(r"\\\n\s*", " ", body).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            print(f"{where}\t{line.strip()}")
EOF
}
git clone -q "$src" "$work/blockattn" || exit 2
user="$work/user"
mkdir -p "$user"
steps=$(extract "$work/blockattn/README.md") || exit 2
while IFS=$'\t' read -r where cmd; do
  if [ "$where" = user ]; then step "$user" "$cmd"; else step "$work/blockattn" "$cmd"; fi
done <<< "$steps"
echo "walkthrough: $n steps, $([ $failed = 0 ] && echo all passed || echo SOME STEP FAILED)" \
  "($work)" | tee -a "$log"
exit $failed
