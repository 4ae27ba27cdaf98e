(** Proofs for [Rounds.v]: the cuts of a piece tile it exactly; the cuts of
    a target cover exactly what its pieces from other ranks cover; packing
    keeps every cut once and every round within the budget (a rank over it
    moves a single cut there); so with [Crossmesh.xplan]'s schedule, every
    element of every target block is either held by the target or received
    exactly once, in one round, from a rank whose source block holds it. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Crossmesh Crossmeshproof Rounds.
Import ListNotations.

(** * Sums *)

Lemma lsum_zero : forall A (l : list A), lsum (fun _ => 0) l = 0.
Proof. intros A l. induction l; simpl; auto. Qed.

Lemma lsum_if_const : forall A (f : A -> nat) (b : bool) l,
  lsum (fun x => if b then f x else 0) l = if b then lsum f l else 0.
Proof. intros A f b l. destruct b; [reflexivity|apply lsum_zero]. Qed.

Lemma lsum_in_le : forall A (f : A -> nat) l x, In x l -> f x <= lsum f l.
Proof. intros A f l. induction l as [|y l IH]; simpl; intros x H; [contradiction|]. destruct H as [<-|H]; [lia|]. specialize (IH x H). lia. Qed.

Lemma lsum_perm : forall A (f : A -> nat) l l', Permutation l l' -> lsum f l = lsum f l'.
Proof. intros A f l l' H. induction H; simpl; lia. Qed.

(** * Runs tile an interval *)

Lemma runs_count : forall per fuel s l x, 0 < per -> l <= fuel ->
  lsum (fun iv => if insideb x iv then 1 else 0) (runs per s l fuel) = if insideb x (s, l) then 1 else 0.
Proof.
  intros per fuel. induction fuel as [|fuel IH]; intros s l x Hp Hl; simpl.
  - unfold insideb; simpl.
    destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + l)); simpl; lia.
  - destruct (Nat.eqb_spec l 0) as [->|Hl0].
    + unfold insideb; simpl. destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + 0)); simpl; lia.
    + simpl. rewrite IH by lia. unfold insideb; simpl.
      destruct (Nat.min_spec per l) as [[H1 H2]|[H1 H2]]; rewrite H2;
        destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + per));
        destruct (Nat.leb_spec (s + per) x); destruct (Nat.ltb_spec x (s + per + (l - per)));
        destruct (Nat.ltb_spec x (s + l)); destruct (Nat.ltb_spec x (s + l)); simpl; lia.
Qed.

(** * Cut boxes tile the box *)

Lemma set_count : forall B p d ivs, d < length B ->
  (forall x, lsum (fun iv => if insideb x iv then 1 else 0) ivs = if insideb x (nth d B (0, 0)) then 1 else 0) ->
  lsum (fun r => if in_boxb p (set_nth B d r) then 1 else 0) ivs = if in_boxb p B then 1 else 0.
Proof.
  induction B as [|iv B IH]; intros p d ivs Hd H; simpl in Hd; [lia|].
  destruct p as [|x p].
  - transitivity (lsum (fun _ : interval => 0) ivs); [|apply lsum_zero].
    apply lsum_ext. intros r _. destruct d; reflexivity.
  - destruct d as [|d]; simpl.
    + destruct (in_boxb p B) eqn:E.
      * rewrite (lsum_ext _ _ (fun r => if insideb x r then 1 else 0)).
        -- rewrite H. simpl. rewrite andb_true_r. reflexivity.
        -- intros r _. rewrite andb_true_r. reflexivity.
      * rewrite andb_false_r. transitivity (lsum (fun _ : interval => 0) ivs); [|apply lsum_zero].
        apply lsum_ext. intros r _. rewrite andb_false_r. reflexivity.
    + destruct (insideb x iv) eqn:E; simpl.
      * apply IH; [lia|]. intros y. rewrite H. reflexivity.
      * apply lsum_zero.
Qed.

Lemma first_long_range : forall B i, first_long B i = 0 \/ (i <= first_long B i < i + length B).
Proof.
  induction B as [|iv B IH]; intros i; simpl; [auto|].
  destruct (1 <? snd iv); [right; lia|]. destruct (IH (S i)); [auto|right; lia].
Qed.

(** Every global index of a box lies in exactly one of its cuts, and in none if outside it. *)
Lemma cut_box_count : forall budget B p,
  lsum (fun C => if in_boxb p C then 1 else 0) (cut_box budget B) = if in_boxb p B then 1 else 0.
Proof.
  intros budget B p. destruct B as [|iv0 B0].
  - simpl. destruct (in_boxb p []); reflexivity.
  - cbn [cut_box]. remember (iv0 :: B0) as B eqn:EB. unfold cut_along.
    rewrite lsum_map. apply set_count.
    + destruct (first_long_range B 0) as [E|[_ H]]; subst B; [rewrite E; simpl; lia|exact H].
    + intros x. rewrite runs_count; [| lia | lia].
      rewrite <- surjective_pairing. reflexivity.
Qed.

Lemma cut_box_inside : forall budget B C p, In C (cut_box budget B) ->
  in_boxb p C = true -> in_boxb p B = true.
Proof.
  intros budget B C p HC Hp.
  pose proof (lsum_in_le _ (fun C => if in_boxb p C then 1 else 0) _ _ HC) as H.
  rewrite cut_box_count, Hp in H. destruct (in_boxb p B); [reflexivity|lia].
Qed.

(** * The cuts of a target *)

Lemma tcuts_count : forall budget j self ps p,
  lsum (fun c => if in_boxb p (cbox c) then 1 else 0) (tcuts budget j self ps)
  = lsum (fun q => if psrc q =? self then 0 else if in_boxb p (pbox q) then 1 else 0) ps.
Proof.
  intros. unfold tcuts. rewrite lsum_flat_map. apply lsum_ext. intros q _.
  destruct (psrc q =? self); [reflexivity|]. rewrite lsum_map. apply cut_box_count.
Qed.

Lemma tcuts_in : forall budget j self ps c, In c (tcuts budget j self ps) ->
  cdst c = self /\ ctgt c = j /\
  exists q, In q ps /\ psrc q <> self /\ csrc c = psrc q /\
    forall p, in_boxb p (cbox c) = true -> in_boxb p (pbox q) = true.
Proof.
  intros budget j self ps c H. unfold tcuts in H. apply in_flat_map in H. destruct H as [q [Hq Hc]].
  destruct (Nat.eqb_spec (psrc q) self) as [_|Hne]; [contradiction|].
  apply in_map_iff in Hc. destruct Hc as [C [<- HC]]. simpl. repeat split; auto.
  exists q. repeat split; auto. intros p Hp. eapply cut_box_inside; eauto.
Qed.

Lemma xcuts_from_seq : forall budget pss tr i,
  xcuts_from budget i tr pss = flat_map (fun j => tcuts budget j (nth (j - i) tr 0) (nth (j - i) pss [])) (seq i (length pss)).
Proof.
  intros budget pss. induction pss as [|ps pss IH]; intros tr i; [reflexivity|].
  cbn [xcuts_from length seq flat_map]. rewrite Nat.sub_diag, IH. f_equal; [destruct tr; reflexivity|].
  rewrite !flat_map_concat_map. f_equal. apply map_ext_in. intros k Hk. apply in_seq in Hk.
  replace (k - i) with (S (k - S i)) by lia.
  destruct tr; [destruct (k - S i); reflexivity|reflexivity].
Qed.

Lemma xcuts_nth : forall budget tr pss,
  xcuts budget tr pss = flat_map (fun j => tcuts budget j (nth j tr 0) (nth j pss [])) (seq 0 (length pss)).
Proof.
  intros. unfold xcuts. rewrite xcuts_from_seq, !flat_map_concat_map. f_equal. apply map_ext. intros k.
  rewrite Nat.sub_0_r. reflexivity.
Qed.

Lemma xcuts_in : forall budget tr pss c, In c (xcuts budget tr pss) ->
  ctgt c < length pss /\ In c (tcuts budget (ctgt c) (nth (ctgt c) tr 0) (nth (ctgt c) pss [])).
Proof.
  intros budget tr pss c H. rewrite xcuts_nth in H. apply in_flat_map in H. destruct H as [k [Hk Hc]].
  apply in_seq in Hk. pose proof (tcuts_in _ _ _ _ _ Hc) as [_ [Ht _]]. rewrite Ht. split; [lia|auto].
Qed.

(** Summing over the cuts of target [j] among all of them. *)
Lemma xcuts_tgt : forall budget tr pss j (g : cut -> nat), j < length pss ->
  lsum (fun c => if ctgt c =? j then g c else 0) (xcuts budget tr pss)
  = lsum g (tcuts budget j (nth j tr 0) (nth j pss [])).
Proof.
  intros budget tr pss j g Hj. rewrite xcuts_nth, lsum_flat_map.
  transitivity (lsum (fun k => if k =? j then lsum g (tcuts budget k (nth k tr 0) (nth k pss [])) else 0)
                     (seq 0 (length pss))).
  - apply lsum_ext. intros k _. destruct (Nat.eqb_spec k j) as [->|Hne].
    + apply lsum_ext. intros c Hc. apply tcuts_in in Hc. destruct Hc as [_ [-> _]]. rewrite Nat.eqb_refl. reflexivity.
    + transitivity (lsum (fun _ : cut => 0) (tcuts budget k (nth k tr 0) (nth k pss []))); [|apply lsum_zero].
      apply lsum_ext. intros c Hc. apply tcuts_in in Hc. destruct Hc as [_ [-> _]].
      destruct (Nat.eqb_spec k j); [contradiction|reflexivity].
  - apply (lsum_pick_seq (fun k => lsum g (tcuts budget k (nth k tr 0) (nth k pss [])))). exact Hj.
Qed.

(** * Packing *)

Lemma load_snoc : forall who r rd c,
  load who r (rd ++ [c]) = load who r rd + (if who c =? r then vol (cbox c) else 0).
Proof. intros. unfold load. rewrite lsum_app. simpl. lia. Qed.

(** A packed round stands for the round [rd] it holds: its cuts, last
    first, and each rank's load sent and received. *)
Definition holds_round (st : rstate) (rd : list cut) : Prop :=
  fst (fst st) = rev rd /\ (forall r, find_or 0 r (snd (fst st)) = load csrc r rd) /\
  (forall r, find_or 0 r (snd st) = load cdst r rd).

Lemma add_in_holds : forall c st rd, holds_round st rd -> holds_round (add_in c st) (rd ++ [c]).
Proof.
  intros c [[rv S] D] rd [Hr [HS HD]]. cbn [fst snd] in Hr, HS, HD. unfold holds_round, add_in. cbn [fst snd].
  split; [rewrite rev_unit, Hr; reflexivity|]. split; intros r; rewrite find_or_add, load_snoc.
  - rewrite !HS. destruct (csrc c =? r) eqn:E; [apply Nat.eqb_eq in E; subst|]; lia.
  - rewrite !HD. destruct (cdst c =? r) eqn:E; [apply Nat.eqb_eq in E; subst|]; lia.
Qed.

Lemma fits_in_holds : forall budget c st rd, holds_round st rd -> fits_in budget c st = fits budget c rd.
Proof. intros budget c [[rv S] D] rd [_ [HS HD]]. cbn [fst snd] in *. unfold fits_in, fits. rewrite HS, HD. reflexivity. Qed.

(** A round is within the budget: every rank sends at most [budget]
    elements or sends exactly one cut, and receives at most [budget]
    elements or receives exactly one cut. *)
Definition bounded (budget : nat) (rd : list cut) : Prop :=
  forall r, (load csrc r rd <= budget \/ length (filter (fun c => csrc c =? r) rd) = 1) /\
            (load cdst r rd <= budget \/ length (filter (fun c => cdst c =? r) rd) = 1).

Lemma count_snoc : forall (who : cut -> nat) r (rd : list cut) c,
  length (filter (fun c => who c =? r) (rd ++ [c])) = length (filter (fun c => who c =? r) rd) + (if who c =? r then 1 else 0).
Proof. intros. rewrite filter_app, app_length. simpl. destruct (who c =? r); simpl; lia. Qed.

Lemma bounded_single : forall budget c, bounded budget [c].
Proof.
  intros budget c r. unfold load. simpl.
  split; [destruct (Nat.eqb_spec (csrc c) r)|destruct (Nat.eqb_spec (cdst c) r)]; simpl; auto; lia.
Qed.

Lemma bounded_snoc : forall budget c rd, bounded budget rd -> fits budget c rd = true -> bounded budget (rd ++ [c]).
Proof.
  intros budget c rd H F r. unfold fits in F. apply andb_true_iff in F. destruct F as [F1 F2].
  apply Nat.leb_le in F1. apply Nat.leb_le in F2. destruct (H r) as [Hs Hd].
  rewrite !load_snoc, !count_snoc. split.
  - destruct (csrc c =? r) eqn:E; [apply Nat.eqb_eq in E; subst; left; lia|]. rewrite !Nat.add_0_r. exact Hs.
  - destruct (cdst c =? r) eqn:E; [apply Nat.eqb_eq in E; subst; left; lia|]. rewrite !Nat.add_0_r. exact Hd.
Qed.

(** * The packing, on a model of lists

    [place_at]: [c] into round [i] when it is one and [c] fits it, else a
    new round at the end; every cut once and every round bounded, whatever
    [i] is. [pack]'s tables hold such a list of rounds ([holds_all]). *)
Definition place_at (budget : nat) (c : cut) (i : nat) (rds : list (list cut)) : list (list cut) :=
  if (i <? length rds) && fits budget c (nth i rds []) then set_nth rds i (nth i rds [] ++ [c]) else rds ++ [[c]].

Lemma nth_set_nth_same : forall A (l : list A) i x d, i < length l -> nth i (set_nth l i x) d = x.
Proof. intros. apply nth_error_nth, nth_error_set_nth_eq. auto. Qed.

Lemma nth_set_nth_other : forall A (l : list A) i k x d, k <> i -> nth k (set_nth l i x) d = nth k l d.
Proof.
  intros A l i k x d H. destruct (Nat.lt_ge_cases k (length l)) as [Hk|Hk].
  - apply nth_error_nth. rewrite nth_error_set_nth_neq by auto. apply nth_error_nth'. auto.
  - rewrite !nth_overflow; rewrite ?set_nth_length; auto.
Qed.

Lemma in_set_nth : forall A (l : list A) i x y, In y (set_nth l i x) -> y = x \/ In y l.
Proof.
  induction l as [|h t IH]; intros i x y H; [destruct H|]. destruct i as [|i]; simpl in H.
  - destruct H as [<-|H]; auto. right. right. exact H.
  - destruct H as [<-|H]; [right; left; reflexivity|]. destruct (IH i x y H) as [E|E]; auto. right. right. exact E.
Qed.

Lemma concat_set_nth_snoc : forall (rds : list (list cut)) i c, i < length rds ->
  Permutation (concat (set_nth rds i (nth i rds [] ++ [c]))) (c :: concat rds).
Proof.
  induction rds as [|rd rds IH]; intros i c H; [simpl in H; lia|]. destruct i as [|i]; simpl.
  - rewrite <- app_assoc. simpl. apply Permutation_sym, Permutation_middle.
  - eapply Permutation_trans; [apply Permutation_app_head, IH; simpl in H; lia|].
    apply Permutation_sym, Permutation_middle.
Qed.

Lemma place_at_perm : forall budget c i rds, Permutation (concat (place_at budget c i rds)) (c :: concat rds).
Proof.
  intros budget c i rds. unfold place_at.
  destruct ((i <? length rds) && fits budget c (nth i rds [])) eqn:E.
  - apply andb_true_iff in E as [E _]. apply Nat.ltb_lt in E. apply concat_set_nth_snoc. exact E.
  - rewrite concat_app. simpl. rewrite ?app_nil_r. apply Permutation_sym, Permutation_cons_append.
Qed.

Lemma place_at_bounded : forall budget c i rds, (forall rd, In rd rds -> bounded budget rd) ->
  forall rd, In rd (place_at budget c i rds) -> bounded budget rd.
Proof.
  intros budget c i rds H rd Hin. unfold place_at in Hin.
  destruct ((i <? length rds) && fits budget c (nth i rds [])) eqn:E.
  - apply andb_true_iff in E as [E F]. apply Nat.ltb_lt in E.
    destruct (in_set_nth _ _ _ _ _ Hin) as [->|Hin']; auto.
    apply bounded_snoc; auto. apply H, nth_In. exact E.
  - apply in_app_or in Hin as [Hin|[<-|[]]]; auto. apply bounded_single.
Qed.

Definition holds_all (rs : NatMap.t rstate) (n : nat) (rds : list (list cut)) : Prop :=
  n = length rds /\ forall i, i < n -> holds_round (find_or empty_round i rs) (nth i rds []).

Lemma holds_empty_round : holds_round empty_round [].
Proof. unfold holds_round, empty_round. cbn [fst snd]. split; [reflexivity|]. split; intros; rewrite find_or_empty; reflexivity. Qed.

Lemma put_holds : forall budget c i rs n rds j rs' n', holds_all rs n rds ->
  put budget c i rs n = (j, rs', n') -> holds_all rs' n' (place_at budget c i rds).
Proof.
  intros budget c i rs n rds j rs' n' [En H] Hp. subst n. unfold put in Hp. unfold place_at.
  assert (Hnew : holds_all (NatMap.add (length rds) (add_in c empty_round) rs) (S (length rds)) (rds ++ [[c]])).
  { split; [rewrite app_length; simpl; lia|]. intros k Hk. rewrite find_or_add.
    destruct (Nat.eqb_spec (length rds) k) as [<-|Hne].
    - rewrite app_nth2 by lia. rewrite Nat.sub_diag. exact (add_in_holds c empty_round [] holds_empty_round).
    - rewrite app_nth1 by lia. apply H. lia. }
  destruct (i <? length rds) eqn:Ei; cbn [andb] in Hp |- *; [|injection Hp as <- <- <-; exact Hnew].
  apply Nat.ltb_lt in Ei. rewrite (fits_in_holds _ _ _ _ (H i Ei)) in Hp.
  destruct (fits budget c (nth i rds [])) eqn:F; injection Hp as <- <- <-; [|exact Hnew].
  split; [rewrite set_nth_length; reflexivity|]. intros k Hk. rewrite find_or_add.
  destruct (Nat.eqb_spec i k) as [<-|Hne].
  - rewrite nth_set_nth_same by auto. apply add_in_holds, H. exact Ei.
  - rewrite nth_set_nth_other by auto. apply H. exact Hk.
Qed.

Lemma pack_fold : forall budget cs st acc,
  (exists rds, holds_all (fst (fst st)) (snd (fst st)) rds /\ Permutation (concat rds) acc /\
     forall rd, In rd rds -> bounded budget rd) ->
  exists rds, holds_all (fst (fst (fold_left (pack_step budget) cs st))) (snd (fst (fold_left (pack_step budget) cs st))) rds /\
    Permutation (concat rds) (acc ++ cs) /\ forall rd, In rd rds -> bounded budget rd.
Proof.
  intros budget cs. induction cs as [|c cs IH]; intros st acc [rds [Hh [Hp Hb]]]; simpl.
  - exists rds. rewrite app_nil_r. auto.
  - replace (acc ++ c :: cs) with ((acc ++ [c]) ++ cs) by (rewrite <- app_assoc; reflexivity).
    apply IH. destruct st as [[rs n] [ss rr]]. cbn [fst snd] in Hh. unfold pack_step.
    destruct (put budget c _ rs n) as [[j rs'] n'] eqn:Ep. cbn [fst snd].
    exists (place_at budget c (scan budget c rs n (Nat.max (find_or 0 (csrc c) ss) (find_or 0 (cdst c) rr)) n) rds).
    split; [eapply put_holds; eauto|]. split.
    + eapply Permutation_trans; [apply place_at_perm|]. eapply Permutation_trans; [apply perm_skip, Hp|].
      apply Permutation_cons_append.
    + apply place_at_bounded. exact Hb.
Qed.

Lemma holds_all_rounds : forall rs n rds, holds_all rs n rds ->
  map (fun i => rev' (fst (fst (find_or empty_round i rs)))) (seq 0 n) = rds.
Proof.
  intros rs n rds [-> H]. apply nth_ext with (d := []) (d' := []).
  - rewrite map_length, seq_length. reflexivity.
  - intros k Hk. rewrite map_length, seq_length in Hk.
    set (f := fun i => rev' (fst (fst (find_or empty_round i rs)))).
    rewrite (nth_indep (map f (seq 0 (length rds))) [] (f 0)) by (rewrite map_length, seq_length; exact Hk).
    rewrite map_nth, seq_nth by exact Hk. unfold f. cbn [plus].
    destruct (H k Hk) as [Hr _]. unfold rev'. rewrite <- rev_alt, Hr, rev_involutive. reflexivity.
Qed.

Lemma pack_model : forall budget cs, exists rds, pack budget cs = rds /\ Permutation (concat rds) cs /\
  forall rd, In rd rds -> bounded budget rd.
Proof.
  intros budget cs. unfold pack.
  destruct (pack_fold budget cs (NatMap.empty rstate, 0, (NatMap.empty nat, NatMap.empty nat)) [])
    as [rds [Hh [Hp Hb]]].
  { exists []. split; [split; [reflexivity|cbn; intros i Hi; lia]|]. split; [constructor|intros rd []]. }
  destruct (fold_left (pack_step budget) cs _) as [[rs n] x]. cbn [fst snd] in Hh.
  exists rds. split; [apply holds_all_rounds; exact Hh|]. auto.
Qed.

(** Every cut is in exactly one round. *)
Theorem pack_perm : forall budget cs, Permutation (concat (pack budget cs)) cs.
Proof. intros budget cs. destruct (pack_model budget cs) as [rds [-> [Hp _]]]. exact Hp. Qed.

Theorem pack_bounded : forall budget cs rd, In rd (pack budget cs) -> bounded budget rd.
Proof. intros budget cs. destruct (pack_model budget cs) as [rds [-> [_ Hb]]]. exact Hb. Qed.

Lemma tgts_nth : forall m r t j self T, nth_error (tgts m r t) j = Some (self, T) -> self = nth j r 0.
Proof.
  intros m r t j self T H. rewrite tgts_nth_map in H. rewrite nth_error_map in H.
  destruct (nth_error (seq 0 (ndevices m)) j) eqn:E; [|discriminate].
  assert (Hj : j < ndevices m).
  { rewrite <- (seq_length (ndevices m) 0). apply nth_error_Some. congruence. }
  apply (nth_error_nth _ _ 0) in E. rewrite seq_nth in E by exact Hj. simpl in E. subst n.
  simpl in H. injection H as <- _. reflexivity.
Qed.

(** The staged cross-mesh transfer: when [xplan] returns a schedule, its
    rounds ([xrounds budget]) hold every cut exactly once and each round is
    within the budget (a rank over it moves one cut there); and every target
    device [j] (world rank [self], block [T]) gets every element of its block
    exactly once: from a piece it holds itself, or in one cut addressed to it,
    which lies inside a piece of its schedule sent by another rank (so
    [xplan_correct]'s data statement applies to it). *)
Theorem xrounds_correct : forall m1 r1 t1 m2 r2 t2 pss budget,
  xplan m1 r1 t1 m2 r2 t2 = Some pss ->
  Permutation (concat (xrounds budget r2 pss)) (xcuts budget r2 pss) /\
  (forall rd, In rd (xrounds budget r2 pss) -> bounded budget rd) /\
  forall j self T, nth_error (tgts m2 r2 t2) j = Some (self, T) ->
  exists ps, nth_error pss j = Some ps /\
    (forall p, in_boxb p T = true ->
       lsum (fun q => if psrc q =? self then (if in_boxb p (pbox q) then 1 else 0) else 0) ps
       + lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
              (concat (xrounds budget r2 pss)) = 1) /\
    (forall c, In c (concat (xrounds budget r2 pss)) -> ctgt c = j ->
       cdst c = self /\ exists q, In q ps /\ psrc q <> self /\ csrc c = psrc q /\
         forall p, in_boxb p (cbox c) = true -> in_boxb p (pbox q) = true).
Proof.
  intros m1 r1 t1 m2 r2 t2 pss budget H.
  assert (Hs : xsched (sdims m1 t1) (srcs m1 r1 t1) (tgts m2 r2 t2) = Some pss).
  { unfold xplan in H. destruct (_ && _); [exact H|discriminate]. }
  destruct (xsched_correct _ _ _ _ Hs) as [Hl Hn].
  pose proof (pack_perm budget (xcuts budget r2 pss)) as Hp.
  split; [exact Hp|]. split; [apply pack_bounded|].
  intros j self T E. destruct (Hn j self T E) as [ps [Eps [Hcov [_ [_ _]]]]].
  exists ps. split; [exact Eps|].
  assert (Hj : j < length pss) by (rewrite Hl; apply nth_error_Some; congruence).
  assert (Hself : self = nth j r2 0) by (eapply tgts_nth; eauto).
  assert (Hps : nth j pss [] = ps) by (apply nth_error_nth; exact Eps).
  split.
  - intros p Hp'. specialize (Hcov p Hp').
    rewrite (lsum_split _ (fun q => if in_boxb p (pbox q) then 1 else 0) (fun q => psrc q =? self) ps) in Hcov.
    cbv beta in Hcov.
    enough (E2 : lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
                      (concat (xrounds budget r2 pss))
                 = lsum (fun q => if psrc q =? self then 0 else if in_boxb p (pbox q) then 1 else 0) ps)
      by lia.
    unfold xrounds. rewrite (lsum_perm _ _ _ _ Hp).
    rewrite (xcuts_tgt budget r2 pss j (fun c => if in_boxb p (cbox c) then 1 else 0) Hj).
    rewrite <- Hself, Hps. apply tcuts_count.
  - intros c Hc Ht. apply (Permutation_in _ Hp) in Hc. apply xcuts_in in Hc. destruct Hc as [_ Hc].
    rewrite Ht, <- Hself, Hps in Hc. apply tcuts_in in Hc. destruct Hc as [Hd [_ [q [Hq [Hne [Hsrc Hin]]]]]].
    split; [exact Hd|]. exists q. auto.
Qed.
