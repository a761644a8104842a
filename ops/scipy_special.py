"""scipy.special's ufuncs called directly on traced values (through NumPy's ufunc protocol).

SciPy is optional (the `scipy` extra): without it nothing is registered here.
"""
