#!/usr/bin/env bash
# The trust statement, checked: `make proofs` runs this. Every check and its
# failure messages are in coq/check_trust.py (read its docstring); options:
#   --pin       rewrite coq/statements.txt and the realizer hashes in
#               coq/realizers.allow from the current sources (deliberately,
#               after reviewing a change to a statement or a realizer);
#   --no-cache  ask coqc for every Print Assumptions answer again.
set -euo pipefail
exec python3 "$(dirname "$0")/check_trust.py" "$@"
