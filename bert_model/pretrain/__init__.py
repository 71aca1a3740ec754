"""Pre-training: shards -> a trained encoder (``bertprep train``).

In: a shard directory (``bertprep.core.schema``) and a ``TrainConfig``. Out: a run directory with
checkpoints (safetensors + the data cursor), metrics and the final model.

Entry points:
- ``train_config.TrainConfig``: every training setting, validated.
- ``trainer.train``: the loop (build, step, log, evaluate, checkpoint); ``build``: the run it trains, from
  ``start`` (the checkpoint or model it starts from, the state a resume restores), ``schedule_setup`` (phases
  in steps, warm-ups, optimizer), ``data_setup`` (shards, loaders) and ``model_setup`` (model config, model,
  compiled and wrapped).
- ``data``: ``ShardDataset``, batches with a cursor that resumes exactly; ``loader``: the worker processes.
- ``shard_info``: what a shard directory says about itself; ``distributed``: DDP set-up.
- ``vocab_extension``: ``init_from`` a model whose vocab the shards' vocab extends (``build-vocab --extend``):
  embeddings, tied decoder and MLM bias grown (BERT or ModernBERT), new rows the mean of their old pieces.
"""
