"""The plans of the lessons: one module per lesson (`lesson08`), each a typed, versioned record of what the lesson
will ask (models, sizes, prompts, samples, server shapes), recorded once in the run.

A run recorded before a plan existed, or under an older version of it, is brought to the current version by that
module's numbered table of upgrades, read from what the older run recorded, the way `store.manifest` upgrades a
manifest. Lesson code reads only the current plan: the branches that keep older recordings replaying live here."""
