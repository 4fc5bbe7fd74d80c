"""tokensweep.kernels"""
