"""Small attention models built from the course's own pieces, their tasks, training and interpretation (chapters 4, 7, 9, 10, 12, 13 and 14).

* :mod:`attnbook.models.blocks`: the MLP, :class:`~attnbook.models.blocks.ScoredAttention`
  (additive or general scores), the encoder block, the attention-only block, the decoder block;
* :mod:`attnbook.models.configs`: :class:`~attnbook.models.configs.SequenceModelConfig` and
  :class:`~attnbook.models.configs.EncoderDecoderConfig`, what a model is in one frozen record;
* :mod:`attnbook.models.sequence`: :class:`~attnbook.models.sequence.SequenceModel` (embedding,
  positions, blocks, output head; decoder-only when causal);
* :mod:`attnbook.models.encoder_decoder`: :class:`~attnbook.models.encoder_decoder.EncoderDecoder`;
* :mod:`attnbook.models.tasks`: the synthetic tasks the models are trained on;
* :mod:`attnbook.models.training`: the training loop and ``parameter_count``;
* :mod:`attnbook.models.interpretability`: head scores, circuits, composition, patching and
  :func:`~attnbook.models.interpretability.ablate_head`;
* :mod:`attnbook.models.recall`: chapter 14's one-layer recall models (softmax, linear or delta-rule
  mixer after a short convolution), ``train_recall_model`` and ``recall_accuracy`` on
  ``MultiQueryRecall`` against the number of pairs;
* :mod:`attnbook.models.packing`: chapter 12's packed rows: the ``PackedRecall`` task (every
  earlier document holds the queried key) and ``PackedDecoder`` (document or causal mask,
  positions restarted or along the row);
* :mod:`attnbook.models.markov`: chapter 13's attention sinks: the ``BigramBackcopy`` Markov chain
  (with or without ``bos``), a one-layer attention-only model trained on it, the weight on a
  position against uniform, key ablation, and streaming evaluation with or without sink tokens.

They are meant to be read and trained on a laptop CPU in seconds, not to be fast. Imports the
wings below it (``core``, ``positions``, ``heads``, ``efficient``, ``programs``, ``linear``) and :mod:`attnbook.validators`.
Re-exports nothing: ``attnbook.models.X`` is a module.
"""
