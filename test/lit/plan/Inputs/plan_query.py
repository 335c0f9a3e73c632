"""Prints selected values of `moec plan --format json` output, one per line,
for FileCheck (lists as (a, b)). Usage: plan_query.py PLAN.json EXPR...  (EXPR is a Python
expression over `p`, the plan object, or `plans` when the file holds a list)."""
import json
import sys

data = json.load(open(sys.argv[1]))
plans = data if isinstance(data, list) else [data]
p = plans[0]
for expr in sys.argv[2:]:
    # Lists print with parentheses: FileCheck reads "[[" as a variable.
    value = json.dumps(eval(expr), sort_keys=True).replace("[", "(").replace("]", ")")
    print(f"{expr} = {value}")
