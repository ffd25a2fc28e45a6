"""normbench backends for Keras 3's ``keras.layers.LayerNormalization`` and
``keras.layers.RMSNormalization``, one per Keras backend: ``keras-jax``, ``keras-torch``,
``keras-tensorflow``. Registered in this package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    keras-jax = "normbench_keras.backends:KerasJax"
    keras-torch = "normbench_keras.backends:KerasTorch"
    keras-tensorflow = "normbench_keras.backends:KerasTensorFlow"

Keras chooses its backend once per process, when it is first imported (``KERAS_BACKEND``,
else ``keras.json``): a process runs the backend Keras was configured with, and the others'
``availability()`` says the command that runs them. Importing this package imports neither
keras nor any framework.
"""

__version__ = "0.1.0"
