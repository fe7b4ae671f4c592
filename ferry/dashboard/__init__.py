"""`ferry dashboard`: the pipeline's console in the browser (issue 21) — completeness, flow, loads, clusters.

Composition only: every number comes from the code behind the console commands (see ``sources``).
"""
