"""websocket"""
