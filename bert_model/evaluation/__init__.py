"""Evaluating a pre-trained encoder as the papers do: GLUE dev (BERT's Table 1) and SQuAD dev.

In: a model (a bertprep run or a Hugging Face directory), a GLUE folder (the standard layout, or a ``datasets``
``save_to_disk`` of ``glue``) or SQuAD files, and a hyperparameter grid. Out: one ``bertprep finetune`` run per
(task, setting, seed) under the output folder, ``glue.md`` / ``squad.md`` (the paper's table) and
``glue.json`` / ``squad.json`` (every run's numbers).

Entry points:
- ``config``: ``GlueEvalConfig`` and ``SquadEvalConfig``, torch-free (the commands' ``--help``);
- ``grid``: the sweep (BERT's by default; TOML files for others, ``grids/*.toml``);
- ``glue_data``: finding the GLUE tasks in a folder;
- ``harness``: ``evaluate_glue`` and ``evaluate_squad`` (resumable: a finished run is kept, a broken one redone);
- ``plan``: the settings record of an evaluation folder (``check_plan``, shared with ``retrieval.evaluate``);
- ``table``: choosing the best setting per task, the median over seeds, and the Markdown tables
  (``render_table``, ``bertprep evaluate table``).
"""
