"""tokensweep.flows"""
