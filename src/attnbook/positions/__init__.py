"""Where a token is (chapters 5, 6 and 9), one module each; ``attnbook`` re-exports the public functions.

* :mod:`attnbook.positions.sinusoidal`: the sinusoidal encoding, its frequencies, the pair
  rotation and the shift matrix (chapter 5);
* :mod:`attnbook.positions.rotary`: rotary position embeddings and the two pair layouts (chapter 9);
* :mod:`attnbook.positions.alibi`: ALiBi's slopes and biases (chapter 9);
* :mod:`attnbook.positions.permutations`: permutation matrices (chapter 6);
* :mod:`attnbook.positions.equivariance`: what a permutation-equivariant model can score (chapter 6).

Imports only :mod:`attnbook.validators`. Re-exports nothing: ``attnbook.positions.X`` is a module.
"""
