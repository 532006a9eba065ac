#!/usr/bin/env bash
# Frontier-CS's own qknorm evaluator (research/problems/qknorm, carried in probe/orig/frontier) on the
# bundled submission, given as the original's Solution class naming the file.
D=/tmp/fcs; rm -rf $D; cp -r probe/orig/frontier $D
SUB=$PWD/submissions/qknorm/submission.py
cat > $D/solution.py <<P
class Solution:
    def solve(self, spec_path=None):
        return {"program_path": "$SUB"}
P
cd $D && t0=$(date +%s) && timeout ${FCS_LIMIT:-200} python3 evaluator.py --solution-path ./solution.py --spec-path ./resources/submission_spec.json --output-path ./result.json > $OUT/frontier.log 2>&1
echo "frontier evaluator: rc $? in $(( $(date +%s) - t0 )) s"; tail -5 $OUT/frontier.log
python3 -c "import json; r = json.load(open('result.json')); print({k: v for k, v in r.items() if k != 'rows'})"
cp result.json $OUT/frontier-result.json
