"""Reading runs back to judge them: compare, history, the checks (claims, evidence, references, verdicts) and
the harness's overhead. Imports the layers below it, never run/ or cli/."""
