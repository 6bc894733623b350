"""The models-from-code entry of aifab's MLflow models: MLflow copies and runs this file.

It only names :class:`aifab.track.pyfunc.AifabPythonModel`, so the model carries no pickle and
loads wherever aifab is installed.
"""

from mlflow.models import set_model

from aifab.track.pyfunc import AifabPythonModel

set_model(AifabPythonModel())
