"""Fine-tuning tasks (BERT paper, section 4): GLUE, SQuAD v1.1/v2.0, NER, SWAG, feature-based NER.

In: a pre-trained model (a bertprep run or a HF directory) and a task's data files. Out: a fine-tuned run
directory with metrics, and predictions (``bertprep predict``).

Entry points:
- ``registry``: the task names and what each reads; ``finetune.finetune``: the shared loop;
  ``predict``: predictions from a fine-tuned run.
- One module per task family: ``glue``, ``squad`` (+ ``squad_data``, ``squad_eval``), ``ner``,
  ``multiple_choice``, ``feature_based``; ``base``: what every task shares (``finetune.json`` settings, the head
  built from its ``architectures`` names, predictions gathered per example).
- ``config``: ``FinetuneConfig``, ``PredictConfig`` and ``GLUE_TASKS``, torch-free (the commands' ``--help``).
"""
