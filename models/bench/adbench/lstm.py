"""ADBench's LSTM objective in plain NumPy, and its gradient with Hecate.

A stack of l LSTM layers (ADBench's variant: the forget and output gates read the layer input,
the input gate and the candidate read the hidden state; every product is elementwise) predicts
the next character of a sequence of c characters of b bits. For t = 0 .. c-2:

    x = seq[t] * in_weight;  per layer: (h, c) = cell(W, B, h, c, x);  x = h
    yhat = x * out_weight + out_bias
    total += seq[t+1] . (yhat - log(2 + sum(exp(yhat))))

and the loss is -total / ((c - 1) b). (The "2 +" comes from ADBench's reference code, which
writes Python's ``sum(exp(yhat), 2)``.) The state is carried from step to step and is not
differentiated; the gradient is taken with respect to the main and extra parameters.
"""
from __future__ import annotations

import numpy as np

from tape import Active, Const, Duplicated, Reverse, autodiff

from .io import LSTMInput


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(weight, bias, hidden, cell, x):
    """One LSTM layer at one step. `weight` and `bias` are (4, b): forget, ingate, outgate,
    change. Returns the new (hidden, cell)."""
    gates = np.stack((x, hidden, x, hidden)) * weight + bias
    forget, ingate, outgate = sigmoid(gates[:3])
    change = np.tanh(gates[3])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


def lstm_predict(layers, extra_params, state, x):
    """Run the stack on one character. `layers` holds (weight, bias) per layer, `extra_params`
    is (in_weight, out_weight, out_bias) and `state` holds (hidden, cell) per layer; returns
    the prediction (b,) and the new state."""
    in_weight, out_weight, out_bias = extra_params
    x = x * in_weight
    new_state = []
    for (weight, bias), (hidden, cell) in zip(layers, state):
        hidden, cell = lstm_cell(weight, bias, hidden, cell, x)
        new_state.append((hidden, cell))
        x = hidden
    return x * out_weight + out_bias, new_state


def lstm_objective(main_params, extra_params, state, sequence):
    """ADBench's LSTM loss (module docstring), a float."""
    n_layers = main_params.shape[0] // 2
    b = sequence.shape[1]
    # Split the parameters once: per layer a (4, b) weight and bias; the three extra rows.
    params = np.reshape(main_params, (n_layers, 2, 4, b))
    layers = [(params[i, 0], params[i, 1]) for i in range(n_layers)]
    extra = tuple(extra_params)
    state = [(state[2 * i], state[2 * i + 1]) for i in range(n_layers)]
    total = 0.0
    for t in range(sequence.shape[0] - 1):
        ypred, state = lstm_predict(layers, extra, state, sequence[t])
        ynorm = ypred - np.log(2 + np.sum(np.exp(ypred)))
        total = total + np.dot(sequence[t + 1], ynorm)
    return -total / ((sequence.shape[0] - 1) * b)


def objective(inp: LSTMInput) -> float:
    """The objective at an ADBench input."""
    return float(lstm_objective(inp.main_params, inp.extra_params, inp.state, inp.sequence))


def gradient(inp: LSTMInput, differentiate=autodiff) -> np.ndarray:
    """Hecate's reverse-mode gradient, flattened in ADBench's layout [main, extra].
    `differentiate` is `autodiff` or a compiled stand-in (`runners.compiled_autodiff`)."""
    d_main, d_extra = np.zeros_like(inp.main_params), np.zeros_like(inp.extra_params)
    differentiate(Reverse, lstm_objective, Active, Duplicated(inp.main_params, d_main),
             Duplicated(inp.extra_params, d_extra), Const(inp.state), Const(inp.sequence))
    return np.concatenate([d_main.ravel(), d_extra.ravel()])
