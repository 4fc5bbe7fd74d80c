"""tokensweep.pipeline"""
