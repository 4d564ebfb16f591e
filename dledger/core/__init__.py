"""dledger/core"""
