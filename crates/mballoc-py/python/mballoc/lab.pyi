from typing import Dict, Iterable, List, Optional, Tuple

def scenarios() -> List[Tuple[str, str]]: ...
def run(
    scenario: str,
    quick: bool = ...,
    backends: Iterable[str] = ...,
    set: Optional[Dict[str, object]] = ...,
    seed: int = ...,
) -> dict: ...
