#!/usr/bin/env bash
# The longest functions in src/, by clang-tidy's readability-function-size (lines of a function's
# body), from a build directory's compile_commands.json: `tools/function_sizes.sh build [N]`
# prints the N longest (default 10), longest first, as "lines file:line function".
set -euo pipefail
build=${1:-build}
top=${2:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json" >&2; exit 2; }
mapfile -t sources < <(python3 - "$build/compile_commands.json" "$root/src" <<'PY'
import json, sys
for entry in json.load(open(sys.argv[1])):
    if entry["file"].startswith(sys.argv[2] + "/"):
        print(entry["file"])
PY
)
# A threshold of 0 lines reports every function with its size; headers are included once each.
printf '%s\n' "${sources[@]}" |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet \
    -checks='-*,readability-function-size' \
    -config='{CheckOptions: [{key: readability-function-size.LineThreshold, value: 0}]}' \
    --header-filter="^$root/src/" 2>/dev/null |
  python3 /dev/fd/3 "$root" "$top" 3<<'PY'
import re, sys
sizes = {}
lines = sys.stdin.read().splitlines()
for i, line in enumerate(lines):
    m = re.match(r"(\S+?):(\d+):\d+: warning: function (.+?) exceeds recommended size", line)
    if not m:
        continue
    for follow in lines[i + 1:i + 4]:
        n = re.search(r"note: (\d+) lines including whitespace and comments", follow)
        if n:
            sizes[(m.group(1), int(m.group(2)))] = (int(n.group(1)), m.group(3))
            break
root = sys.argv[1] + "/"
for (path, line), (size, name) in sorted(sizes.items(), key=lambda kv: -kv[1][0])[:int(sys.argv[2])]:
    print("%5d %s:%d %s" % (size, path.replace(root, ""), line, name))
PY
