"""The chain's published epoch data (a node's REST answers, one folder per epoch): read and
checked (``epoch_folder``), the epoch's params (``epoch_params``), a fleet built from it
(``fleet``) and the fidelity of keepersim's model to what the chain recorded (``fidelity``)."""
